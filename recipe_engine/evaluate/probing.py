"""Asking models the probes: the base and every stage of a finished run answer the same
probes with the same generation settings, and are scored (exact match, contains, the stage's
own held-out loss). `evaluate.probes` says what they are asked, `run.measuring` is the one pass
over a model, `evaluate.scoring` writes what this measures as records, `report.compare` renders
them.

A model loaded here is measured on the full-precision base (adapters applied to the
unquantized model), one model in memory at a time. After a run, the passes the run made itself
(each stage on its trained model in memory: a QLoRA stage on its 4-bit base) are read instead,
where they answered the same probes; each model's `measured_on` says which.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.compare import EvalOverrides
from recipe_engine.config.schema import EngineConfig, EvalConfig
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.preference_probes import (
    PreferenceJudge,
    is_preference_stage,
    preference_rows,
)
from recipe_engine.evaluate.probes import probe_set
from recipe_engine.run.evaluation import task_metrics
from recipe_engine.run.held_out_loss import LossSettings, loss_settings
from recipe_engine.run.measuring import (
    Asked,
    Questions,
    base_name_of,
    measure_model,
    read_measurement,
)
from recipe_engine.store.records import ADAPTER, EVALUATION, Manifest, RunSummary
from recipe_engine.store.scores import (
    Generation,
    Measured,
    Measurement,
    ModelMetrics,
    Stage,
    root_stage,
)
from recipe_engine.store.stage_records import known_fields

log = logging.getLogger("recipe_engine")


@dataclass(frozen=True)
class RunOverrides:
    """Where the caller knows better than a finished run's records: eval settings over the
    run's own (EvalConfig keys), the seed, held-out rows it has read already (the run that
    just trained), so they are not read again, and `measured`: the run measured its models
    itself (`run.measuring`), so a model whose record answers the same probes is not loaded."""

    settings: EvalOverrides | None = None
    seed: int | None = None
    held_out: Any = None
    measured: bool = False


def measure_run(
    run_dir: Path,
    *,
    probes: str | Path | None = None,
    overrides: RunOverrides | None = None,
    also: ModelVisitor | None = None,
) -> Measured:
    """The base and every stage of a finished run on one probe set (`probes`, a file, or the
    run's held-out rows), asked as the run was unless `overrides` say otherwise; `also` is
    shown each model while it is loaded (another measurement of the same models: the
    harness), so each loads once."""
    overrides = overrides or RunOverrides()
    settings, seed, held_out = overrides.settings, overrides.seed, overrides.held_out
    run_dir = Path(run_dir)
    summary = _read_summary(run_dir)
    stages = _stage_outputs(summary, run_dir)
    run_cfg = _run_config(run_dir, summary.recipe)
    evaluation = settings.over(run_cfg.eval) if settings else run_cfg.eval
    seed = run_cfg.seed if seed is None else seed
    root = root_stage(stages)
    limit = evaluation.max_samples
    probed, source = probe_set(probes, root[1:], seed, held_out, limit)
    asked = Asked(probed, preference_rows(stages, seed, limit))
    generation = Generation.from_settings(asdict(evaluation), seed)
    stored = run_dir if overrides.measured and probes is None and also is None else None
    questions = Questions(asked, generation)
    outputs, metrics = _answer_all(_loaders(stages, root), questions, also, stored)
    return Measured(run_dir, summary.recipe, stages, probed, source, outputs, metrics, generation)


def evaluate_models(
    run_dir: Path,
    models: Sequence[str],
    *,
    settings: Mapping[str, Any],
    seed: int,
    probes: str | Path | None = None,
) -> dict[str, ModelMetrics]:
    """Metrics of some models of a finished run (`BASE` and/or stage names) on the run's
    held-out probes (or `probes`, a file), measured as `measure_run` measures them
    (full-precision base), writing nothing: for a caller that has the others' metrics stored
    already."""
    stages = _stage_outputs(_read_summary(Path(run_dir)), Path(run_dir))
    root = root_stage(stages)
    limit = settings.get("max_samples")
    probed, _ = probe_set(probes, root[1:], seed, None, limit)
    loaders = _loaders(stages, root)
    # Rewards are judged against the base, so it is measured on judged rows whenever they are.
    judged = preference_rows(stages, seed, limit)
    wanted = [
        loader for loader in loaders if loader[0] in models or (judged and loader is loaders[0])
    ]
    asked = Asked(probed, judged)
    generation = Generation.from_settings(settings, seed)
    metrics = _answer_all(wanted, Questions(asked, generation))[1]
    return {name: values for name, values in metrics.items() if name in models}


# Model name, what loads it (model, processor), and the loss settings it is measured with.
Loader = tuple[str, Callable[[], tuple[Any, Any]], LossSettings]
# Another measurement shown each loaded model: (name, model, processor).
ModelVisitor = Callable[[str, Any, Any], None]


def run_stages(run_dir: Path) -> list[Stage]:
    """(name, output folder, manifest) of every trained stage of a finished run."""
    return _stage_outputs(_read_summary(Path(run_dir)), Path(run_dir))


def model_loaders(run_dir: Path) -> tuple[str, list[Loader]]:
    """The run's kind (causal_lm, vlm) and its models as `measure_run` loads them: the base
    first, then every stage (adapters on their full-precision base), each loaded only when its
    turn comes. For other measurements of the same models (`evaluate.harness`)."""
    stages = _stage_outputs(_read_summary(Path(run_dir)), Path(run_dir))
    root = root_stage(stages)
    return root[2].kind, _loaders(stages, root)


def lineage_loaders(stages: list[Stage]) -> list[Loader]:
    """The models of a lineage of stages (a stage and its ancestors, root first, as a run's
    summary or the store's parent keys give them) as `measure_run` loads them: the base, then
    every stage. For a model asked on its own (`evaluate.chat`)."""
    return _loaders(stages, root_stage(stages))


def _loaders(stages: list[Stage], root: Stage) -> list[Loader]:
    """The base model first, then every stage, each loaded only when its turn comes. Each stage
    is measured with its own loss settings, the base with the root stage's (trained on it)."""
    base_name = base_name_of([name for name, _, _ in stages])
    loaders: list[Loader] = [
        (base_name, lambda: _load_base(root[1], root[2]), _loss_settings(root[2]))
    ]
    loaders += [
        (
            name,
            lambda f=folder, m=manifest, n=name: _load_stage(n, f, m, stages),
            # A preference stage has no SFT loss of its own: the probes' loss is the root's.
            _loss_settings(root[2] if is_preference_stage(manifest) else manifest),
        )
        for name, folder, manifest in stages
    ]
    return loaders


def _loss_settings(manifest: Manifest) -> LossSettings:
    """The stage's held-out loss settings; a manifest written before they were recorded gives
    its `train` keys and the engine's defaults of then."""
    if manifest.trainer:
        return loss_settings(manifest.trainer)
    train = dict(manifest.config.get("train") or {})
    defaults: LossSettings = {
        "per_device_eval_batch_size": train.get("per_device_train_batch_size", 8)
    }
    if manifest.kind == "vlm":
        defaults |= {"max_length": None, "remove_unused_columns": False}
    return loss_settings({**defaults, **train})


def _answer_all(
    loaders: list[Loader],
    questions: Questions,
    also: ModelVisitor | None = None,
    stored: Path | None = None,
) -> tuple[dict[str, list[str]], dict[str, ModelMetrics]]:
    """Every model's answers to the probes and its metrics (task metrics need references),
    with the preference metrics on the judged rows where the run has them (rewards against the
    base, the first model). A model whose pass the run folder `stored` holds, answering the
    same, is read from it; any other is loaded and measured (one at a time)."""
    asked = questions.asked
    references = [probe.reference for probe in asked.probes]
    outputs: dict[str, list[str]] = {}
    metrics: dict[str, ModelMetrics] = {}
    on_judged = PreferenceJudge(asked.judged, questions.generation)
    for name, load, settings in loaders:
        identity = questions.identity(settings)
        measurement = read_measurement(stored, name, identity) if stored else None
        if measurement is None:
            log.info("compare: %s on %d probe(s)", name, len(asked.probes))
            model, processor = load()
            measurement = measure_model(model, processor, questions, settings)
            if also is not None:
                also(name, model, processor)
            del model, processor
            gc.collect()  # one model in memory at a time
        else:
            log.info("compare: %s as the run measured it", name)
        outputs[name] = measurement.answers
        metrics[name] = model_metrics(measurement, references)
        on_judged.add(name, measurement.judged)
    on_judged.judge(metrics)
    return outputs, metrics


def model_metrics(measurement: Measurement, references: list[str | None]) -> ModelMetrics:
    """A model's comparison metrics from its pass: task metrics where every probe has a
    reference, the held-out loss where it was measured."""
    values = ModelMetrics(n=len(references), measured_on=measurement.precision)
    if references and all(r is not None for r in references):
        values.task = task_metrics(measurement.answers, [str(r) for r in references])
    if measurement.loss_measured:
        values.eval_loss, values.loss_measured = measurement.eval_loss, True
    return values


def _read_summary(run_dir: Path) -> RunSummary:
    if not run_dir.is_dir():
        raise RecipeError(f"Run folder {run_dir} does not exist. Pass run=<a run folder>.", "run")
    summary = RunSummary.load(run_dir)
    if not summary.stages:
        raise RecipeError(f"{run_dir} lists no stages: nothing to compare.", key="run")
    return summary


def _stage_outputs(summary: RunSummary, run_dir: Path) -> list[Stage]:
    """(stage, output folder, manifest) per stage of the run, each checked to be complete."""
    found = []
    for row in summary.stages:
        folder = row.output_path(run_dir)
        manifest = _stage_manifest(row.stage, folder)
        if manifest.format != EVALUATION:  # evaluation stages hold results, not weights
            found.append((row.stage, folder, manifest))
    return found


def _stage_manifest(name: str, folder: Path) -> Manifest:
    fix = f"Rerun the recipe (force=[{name}] retrains it)."
    if not folder.is_dir():
        raise RecipeError(f"Stage `{name}`: its output folder {folder} is missing. {fix}", "run")
    if not (folder / "COMPLETE").is_file():
        raise RecipeError(
            f"Stage `{name}`: {folder} is not a completed stage output (no COMPLETE marker). {fix}",
            key="run",
        )
    return Manifest.load(folder, stage=name)


@dataclass(frozen=True)
class RunSettings:
    """What a finished run was asked to evaluate with: its eval settings (as its config holds
    them) and its seed."""

    eval: EvalConfig
    seed: int


def run_settings(run_dir: Path) -> RunSettings:
    """What a finished run evaluates with (its eval settings and seed), as `compare` reads
    them: for a model of the run asked on its own (`evaluate.chat`)."""
    return _run_config(Path(run_dir), _read_summary(Path(run_dir)).recipe)


def _run_config(run_dir: Path, recipe: str) -> RunSettings:
    """The run's eval settings and seed: Hydra's saved config, else the recipe recomposed."""
    from omegaconf import OmegaConf

    saved = run_dir / ".hydra" / "config.yaml"
    cfg: Any = None
    if saved.is_file():
        try:
            cfg = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
        except Exception:  # an unreadable saved config falls back to recomposing
            cfg = None
    if cfg is None:
        from recipe_engine.config.compose import compose_config

        try:  # the run's own overrides are unknown here: the recipe's defaults stand in
            cfg = OmegaConf.to_container(compose_config([f"recipe={recipe}"]), resolve=False)
        except RecipeError:  # e.g. a recipe from a --config-dir not given now
            cfg = {}
    return RunSettings(
        eval=EvalConfig(**known_fields(EvalConfig, cfg.get("eval") or {})),
        seed=cfg.get("seed", EngineConfig.seed),
    )


def _device_map(manifest: Manifest) -> Any:
    """The stage's recorded device map where this machine can honour it, else the CPU."""
    import torch

    planned = manifest.placement.device_map if manifest.placement else None
    if planned and torch.cuda.is_available():
        return planned
    return {"": "cpu"}


def _load_base(folder: Path, root: Manifest) -> tuple[Any, Any]:
    from recipe_engine.resolve.models import model_location

    entry = root.model
    location = root.base_path(folder.parent) or model_location(entry)
    if _missing_local(location):
        # A merged handoff folder is deleted after its stage commits: rebuild from the entry.
        location = model_location(entry)
    return _guarded("base", location, lambda: _pretrained(location, root), stage=False)


def _load_stage(
    name: str, folder: Path, manifest: Manifest, stages: list[Stage]
) -> tuple[Any, Any]:
    def load() -> tuple[Any, Any]:
        if manifest.format != ADAPTER:
            return _pretrained(str(folder), manifest)
        from peft import PeftModel

        base = _adapter_base(folder, manifest, stages)
        model = PeftModel.from_pretrained(base, str(folder))
        return model, _processor(str(folder), manifest)

    return _guarded(name, folder, load)


def _adapter_base(folder: Path, manifest: Manifest, stages: list[Stage]) -> Any:
    """The full-precision model an adapter applies to (its 4-bit training base, unquantized)."""
    location = manifest.base_path(folder.parent)
    if location and not _missing_local(location):
        return _pretrained(location, manifest)[0]
    parent = manifest.parent
    for name, folder, parent_manifest in stages:
        if name == parent:
            # The parent was an adapter whose merged handoff folder is gone: merge it again.
            model, _ = _load_stage(name, folder, parent_manifest, stages)
            return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    raise RecipeError(
        f"The base of adapter stage `{manifest.stage}` ({location}) no longer exists and "
        "its parent stage is not in this run. Rerun the recipe.",
        key="run",
    )


def _pretrained(location: str, manifest: Manifest) -> tuple[Any, Any]:
    from recipe_engine.run.loading import load_pretrained

    model = load_pretrained(
        str(location),
        manifest.model,
        dtype=manifest.dtype,
        device_map=_device_map(manifest),
    )
    return model, _processor(str(location), manifest)


def _processor(location: str, manifest: Manifest) -> Any:
    from recipe_engine.run.loading import load_processor

    return load_processor(location, manifest.model)


def _guarded(
    name: str, where: Any, load: Callable[[], tuple[Any, Any]], *, stage: bool = True
) -> tuple[Any, Any]:
    """Loading errors of a damaged folder become one RecipeError naming the stage."""
    try:
        return load()
    except RecipeError:
        raise
    except Exception as error:  # safetensors, PEFT and transformers raise many types
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RecipeError(
            f"Could not load `{name}` from {where}: {detail}. The folder is damaged or "
            + (
                f"incomplete; rerun the recipe (force=[{name}] retrains the stage)."
                if stage
                else "incomplete; check the model entry's source (tiny models rebuild on use)."
            ),
            key="run",
        ) from None


def _missing_local(location: str) -> bool:
    # Hub ids ("org/name") are not local paths; only absolute/relative folders can be missing.
    path = Path(location).expanduser()
    looks_local = path.is_absolute() or location.startswith((".", "~"))
    return looks_local and not path.exists()
