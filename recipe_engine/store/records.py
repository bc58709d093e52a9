"""Typed records of what the engine wrote: a stage's `manifest.json`, a run's `summary.json`.

Every writer and reader goes through these classes, so a field has one name and one meaning.
Both are versioned (`schema_version`); files written before versioning read as version 0.
Paths inside them are relative to the folder that holds the record's owner (the store for a
manifest's `base_location`, the run folder for a summary's `output`), so a store or run folder
can be moved or copied; a path the user gave stays absolute, and so does the machine-local
cache folder of a tiny model or converted GGUF base (`Manifest.loadable_base` rebuilds it where
it is missing).

A manifest records the `Platform` its stage ran on: one key trained twice on one platform gives
identical weights, but across platforms floating-point results may differ, so a result is named
by (key, platform). The record and its comparison live here, free of torch (reports read them);
`run.machine` measures it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.capabilities.judged import summary
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject, atomic_write_json
from recipe_engine.store.stage_records import (
    Census,
    Checksums,
    Handoff,
    QuantizationFacts,
    RecordedDeterminism,
    RecordedPlacement,
    TrainableReport,
    known_fields,
    read_census,
    read_record,
    read_trainable_report,
)

MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 1

# Manifest formats: what a stage output folder holds.
FULL = "full"  # save_pretrained weights
ADAPTER = "peft_adapter"  # a PEFT adapter on `base_location`
EVALUATION = "evaluation"  # predictions and metrics, no weights


# Platform fields whose difference can change floating-point results: torch picks kernels by
# the CPU's instruction set (and MKL / oneDNN by its microarchitecture, hence the model name) or
# by the GPU, a reduction's order follows the thread count, and each library's version is its
# code. The Python version only describes.
DESCRIPTIVE_FIELDS = ("python",)
# The libraries `Platform.describe` names (every one is compared).
DESCRIBED_LIBRARIES = ("torch", "transformers", "trl", "peft", "bitsandbytes")


@dataclass(frozen=True)
class Difference:
    """One field in which platforms differ, with each platform's value (first seen first)."""

    name: str  # "cpu capability", "threads", "torch", ...
    values: tuple[str, ...]
    changes_results: bool  # a field that can change floating-point results

    def text(self) -> str:
        return f"{self.name} {' vs '.join(self.values)}"


@dataclass(frozen=True)
class Platform:
    """Where a stage ran, as far as its floating-point results depend on it."""

    device: str  # cpu | cuda | mps: where the stage's weights were
    cpu: str  # the CPU's model name
    cpu_capability: str | None  # torch's CPU kernel set: DEFAULT, AVX2, AVX512, ...
    cpu_bfloat16: str | None = None  # native (AVX512-BF16, AMX) or emulated on float32 units
    gpu: str | None = None  # the CUDA device's name (CUDA stages)
    gpu_capability: str | None = None  # its compute capability, "9.0"
    threads: int = 1  # torch's intra-op threads
    deterministic: bool = False  # deterministic algorithms were asked for
    python: str = ""
    libraries: dict[str, str | None] = field(default_factory=dict)  # versions.LIBRARIES

    def describe(self) -> str:
        """One line: "CPU AMD EPYC (AVX2), 2 threads, torch 2.14.1, ..., not deterministic"."""
        bfloat16 = f", bfloat16 {self.cpu_bfloat16}" if self.cpu_bfloat16 else ""
        where = f"CPU {self.cpu} ({self.cpu_capability or 'capability unknown'}{bfloat16})"
        if self.gpu:
            where = f"GPU {self.gpu} (capability {self.gpu_capability}), {where}"
        elif self.device != "cpu":
            where = f"{self.device}, {where}"
        named = [f"{n} {self.libraries[n]}" for n in DESCRIBED_LIBRARIES if self.libraries.get(n)]
        mode = "deterministic" if self.deterministic else "not deterministic"
        threads = f"{self.threads} thread" + ("" if self.threads == 1 else "s")
        return ", ".join([where, threads, *named, mode])

    def differences(self, other: Platform) -> list[Difference]:
        """The fields in which `other` differs from this platform, this one's value first."""
        return platform_differences([self, other])

    def values(self) -> dict[str, str]:
        """Every compared field as text, each library under its own name."""
        return {
            "device": self.device,
            "cpu model": self.cpu,
            "cpu capability": str(self.cpu_capability),
            # recorded since engines tell it (an older record's reads "not recorded")
            **({"cpu bfloat16": self.cpu_bfloat16} if self.cpu_bfloat16 else {}),
            "gpu": str(self.gpu),
            "gpu capability": str(self.gpu_capability),
            "threads": str(self.threads),
            "deterministic": "on" if self.deterministic else "off",
            **{name: version or "not installed" for name, version in self.libraries.items()},
            "python": self.python,
        }

    @classmethod
    def from_record(cls, data: Any) -> Platform | None:
        """The platform a manifest holds; None in one written before platforms were recorded."""
        return cls(**known_fields(cls, data)) if isinstance(data, dict) else None


def platform_differences(platforms: Sequence[Platform]) -> list[Difference]:
    """The fields in which the platforms differ, each platform's value in their order."""
    tables = [platform.values() for platform in platforms]
    names = dict.fromkeys(name for table in tables for name in table)
    found = []
    for name in names:  # a library an older engine did not record reads "not recorded"
        values = tuple(dict.fromkeys(table.get(name, "not recorded") for table in tables))
        if len(values) > 1:
            found.append(Difference(name, values, name not in DESCRIPTIVE_FIELDS))
    return found


def differences_text(differences: Sequence[Difference]) -> str:
    """ "cpu capability AVX2 vs AVX512, threads 2 vs 4: floating-point results may differ"."""
    text = ", ".join(difference.text() for difference in differences)
    if any(difference.changes_results for difference in differences):
        text += ": floating-point results may differ"
    return text


def distinct_platforms(platforms: Iterable[Platform | None]) -> list[Platform]:
    """Each recorded platform once, first seen first (unrecorded ones left out)."""
    distinct: list[Platform] = []
    for platform in platforms:
        if platform is not None and platform not in distinct:
            distinct.append(platform)
    return distinct


def platform_warning(what: str, platforms: Iterable[Platform | None]) -> str | None:
    """ "warning: <what> came from 2 platforms, which differ in ...", or None for one."""
    distinct = distinct_platforms(platforms)
    if len(distinct) < 2:
        return None
    how = differences_text(platform_differences(distinct))
    return f"warning: {what} came from {len(distinct)} platforms, which differ in {how}"


def platform_lines(
    what: str, labelled: Sequence[tuple[str, Platform | None]], *, bullet: str = "  "
) -> list[str]:
    """The warning, then which results (by label) came from which platform; nothing when
    they share one."""
    warning = platform_warning(what, [platform for _, platform in labelled])
    if warning is None:
        return []
    lines = [warning]
    for platform in distinct_platforms(platform for _, platform in labelled):
        labels = dict.fromkeys(label for label, theirs in labelled if theirs == platform)
        lines.append(f"{bullet}{', '.join(labels)}: {platform.describe()}")
    return lines


@dataclass
class StageMetrics:
    """Training and held-out metrics of one stage (None where not measured)."""

    steps: int | None = None
    planned_steps: int | None = None
    preflight_loss: float | None = None
    train_losses: list[float] = field(default_factory=list)
    train_samples: int | None = None
    eval_loss: float | None = None
    eval_samples: int | None = None
    eval_accuracy: float | None = None
    eval_contains: float | None = None  # share of answers that contain their reference
    base_accuracy: float | None = None  # the untrained base, on the same rows (root stages)
    base_contains: float | None = None
    evaluation_error: str | None = None  # the evaluation failed; the weights are committed
    # A preference stage's held-out rows: TRL's metrics against the stage's reference and its
    # greedy answers' (capabilities.judged names them; run.preference_scores measures them).
    preference: dict[str, float] | None = None
    # Peak memory of training on one device, in GiB: the plan's estimate and what was measured
    # (run.memory_peak: CUDA allocator peak, or live tensor bytes on CPU), and how.
    estimated_peak_gib: float | None = None
    measured_peak_gib: float | None = None
    memory_measure: str | None = None

    def eval_text(self) -> str:
        """ "acc 96%, loss 0.037", or "-" when nothing was evaluated."""
        parts = ["evaluation failed"] if self.evaluation_error else []
        if self.eval_accuracy is not None:
            parts.append(f"acc {self.eval_accuracy:.0%}")
        judged = summary(self.preference)
        if judged:
            parts.append(judged)
        if self.eval_loss is not None:
            parts.append(f"loss {self.eval_loss:.3f}")
        return ", ".join(parts) or "-"

    def loss_text(self) -> str:
        """ "2.000 -> 1.000": the first and last logged training loss; one number where only
        one step was logged (a run shorter than logging_steps), which is no flat curve."""
        losses = self.train_losses
        if len(losses) == 1:
            return f"{losses[0]:.3f}"
        return f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "-"


def precision_of(bits: str) -> str:
    """The precision of a base whose weights are stored in `bits` (none | 4bit | 8bit): "full",
    "4-bit" or "8-bit", as records label it."""
    return "full" if bits == "none" else bits.replace("bit", "-bit")


@dataclass
class Manifest:
    """`manifest.json` of a store entry: what the stage is, how it was made, what it measured."""

    stage: str
    recipe: str
    fingerprint: str
    format: str  # FULL | ADAPTER | EVALUATION
    # The model entry it descends from, as `manifest.json` holds it; `model` reads it typed.
    model_entry: JsonObject
    dtype: str
    parent: str | None = None
    parent_fingerprint: str | None = None
    base_location: str | None = None  # what the weights were loaded from (see `base_path`)
    architecture: str | None = None
    # The stage's resolved settings (config.schema.StageConfig) and its data settings
    # (config.schema.DataConfig), as recorded: `resolve.data.data_config` reads the latter back.
    config: JsonObject = field(default_factory=dict)
    # The SFTConfig arguments it trained with (all but output_dir): `compare` measures the
    # held-out loss with the same ones (run.held_out_loss).
    trainer: LibraryKwargs = field(default_factory=dict)
    data: JsonObject = field(default_factory=dict)
    placement: RecordedPlacement | None = None  # None: an evaluation stage, an old manifest
    quantization: QuantizationFacts = field(default_factory=QuantizationFacts)
    trained_components: list[str] = field(default_factory=list)
    frozen_components: list[str] = field(default_factory=list)
    lora_components: list[str] = field(default_factory=list)  # trained through adapters
    trainable_report: TrainableReport = field(default_factory=dict)
    census: Census = field(default_factory=dict)
    trained_parameters: list[str] = field(default_factory=list)
    trained_checksums: Checksums = field(default_factory=dict)
    handoff: Handoff = field(default_factory=Handoff)
    metrics: StageMetrics = field(default_factory=StageMetrics)
    # How the held-out evaluation generated (config.schema.EvalConfig, as recorded): a stage's
    # key leaves these out, so a reused stage's numbers are comparable with another's only
    # when these match.
    eval_settings: JsonObject | None = None
    world_size: int = 1
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str | None] = field(default_factory=dict)
    # Where it ran (rank 0's, in a distributed run); None in manifests written before.
    platform: Platform | None = None
    # What its weights can be trusted to repeat; None in manifests written before.
    determinism: RecordedDeterminism | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def kind(self) -> str:
        return str(self.model_entry.get("kind", "vlm"))

    @property
    def model(self) -> ModelConfig:
        """The model entry it descends from (config.schema.ModelConfig), checked as a recipe's
        is: a key an older engine wrote that the entry no longer has is left out, a key it did
        not write takes its default."""
        return _model_config(self.model_entry, self.stage)

    @property
    def bits(self) -> str:
        return self.quantization.bits or "none"

    @property
    def base_precision(self) -> str:
        """The precision of the base the stage trained and evaluated on: "4-bit", "8-bit" or
        "full" (a quantized stage's own accuracy is measured on its quantized base)."""
        return precision_of(self.bits)

    def trained_text(self) -> str:
        """What the stage trained, from its trainable report (what had requires_grad):
        "vision_tower (62.5%), projector" or "language_model (LoRA), lm_head"; a component
        the freeze patterns left partly trainable shows its share."""
        report = {c: r for c, r in self.trainable_report.items() if c != "total"}
        if not report:  # a manifest without a report: the policy's components
            return ", ".join(self.trained_components) or "-"
        parts = []
        for component, row in report.items():
            if not row.trainable:
                continue
            if component in self.lora_components:
                parts.append(f"{component} (LoRA)")
            elif row.trainable < row.params:
                parts.append(f"{component} ({row.trainable / row.params:.1%})")
            else:
                parts.append(component)
        return ", ".join(parts) or "-"

    def base_path(self, store_root: Path) -> str | None:
        """`base_location` as `from_pretrained` takes it: store-relative paths made absolute."""
        return _resolve(self.base_location, store_root)

    def loadable_base(self, store_root: Path) -> str | None:
        """`base_path`, or where this machine builds the base when the recorded folder is gone
        and is one the engine makes from the model entry (a tiny model, a converted GGUF file):
        those live in a machine-local cache, so a store copied to another machine (or a cleared
        cache) would otherwise lose the base of every root adapter stage. Builds it if needed."""
        location = self.base_path(store_root)
        if not (location and Path(location).is_absolute() and not Path(location).exists()):
            return location
        if not self._base_is_built_from_entry():
            return location
        from recipe_engine.resolve.models import model_location

        model = self.model
        built = model_location(model)
        # A tiny model of another build version has other weights: the adapter fits it no more.
        same = model.source != "tiny" or Path(built).name == Path(location).name
        return built if same else location

    def _base_is_built_from_entry(self) -> bool:
        """A root stage that started from its model entry (not from `init.path`), and that
        entry is built into the engine's cache rather than read where the user keeps it."""
        init = self.config.get("init") or {}
        model = self.model
        built = model.source == "tiny" or bool(model.gguf_file)
        return self.parent is None and not init.get("path") and built

    def save(self, folder: Path) -> None:
        atomic_write_json(folder / MANIFEST_FILE, self.to_json())

    def to_json(self) -> JsonObject:
        """The manifest as `manifest.json` holds it: a record that was not made (an
        evaluation stage's placement and quantization, a handoff with nothing to verify)
        is written as `{}`, as it always was."""
        data = dataclasses.asdict(self)
        data["placement"] = data["placement"] or {}
        data["handoff"] = self.handoff.to_json()
        if self.quantization == QuantizationFacts():
            data["quantization"] = {}
        return data

    @classmethod
    def load(cls, folder: Path, *, stage: str | None = None) -> Manifest:
        """Read a stage output's manifest; a missing or damaged one is one RecipeError."""
        who = f"Stage `{stage}`: " if stage else ""
        fix = f"Rerun the stage (force=[{stage}] retrains it)." if stage else "Rerun the stage."
        what = f"{who}{folder} is not a completed stage output"
        data = _read_json(folder / MANIFEST_FILE, what, fix)
        try:
            records = _records(data)  # taken out first: the rest are plain fields
            return cls(**known_fields(cls, data), **records)
        except TypeError as error:  # a required field is missing
            what = f"{who}{folder}/{MANIFEST_FILE} is incomplete ({error})"
            raise RecipeError(f"{what}. {fix}") from None


def _model_config(entry: JsonObject, stage: str) -> ModelConfig:
    """A recorded model entry over the schema's defaults, as Hydra merges a recipe's."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(ModelConfig, known_fields(ModelConfig, entry))
        model = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise RecipeError(
            f"Stage `{stage}`: the model entry its manifest records is not one this engine "
            f"reads ({str(error).splitlines()[0]}). Rerun the stage (force=[{stage}])."
        ) from None
    assert isinstance(model, ModelConfig), type(model)
    return model


def _records(data: JsonObject) -> dict[str, object]:
    """The manifest's fields that are records, read from their JSON (taken out of `data`)."""
    take = data.pop
    return {
        "metrics": StageMetrics(**known_fields(StageMetrics, take("metrics", None) or {})),
        "platform": Platform.from_record(take("platform", None)),
        "placement": read_record(RecordedPlacement, take("placement", None)),
        "quantization": read_record(QuantizationFacts, take("quantization", None))
        or QuantizationFacts(),
        "trainable_report": read_trainable_report(take("trainable_report", None)),
        "census": read_census(take("census", None)),
        "handoff": Handoff.from_json(take("handoff", None)),
        "determinism": read_record(RecordedDeterminism, take("determinism", None)),
    }


@dataclass
class StageRow:
    """One stage of a run, as `summary.json` lists it and the run table prints it."""

    stage: str
    status: str  # trained | evaluated | cached
    key: str  # the short stage key
    output: str  # its store entry, relative to the run folder
    init: str = "-"  # where its weights came from, in words
    trained: str = "-"
    steps: int | str = "-"
    loss: str = "-"
    eval: str = "-"
    time_s: float = 0.0

    def output_path(self, run_dir: Path) -> Path:
        return Path(_resolve(self.output, run_dir) or "")


@dataclass
class RunSummary:
    """`summary.json` of a run folder: the recipe and each stage's store entry."""

    recipe: str
    stages: list[StageRow] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / SUMMARY_FILE, dataclasses.asdict(self))

    @classmethod
    def load(cls, run_dir: Path) -> RunSummary:
        fix = "Point at a folder that a finished `run` wrote (outputs/runs/<recipe>/<time>)."
        data = _read_json(run_dir / SUMMARY_FILE, f"{run_dir} is not a finished run folder", fix)
        try:
            stages = data.pop("stages", None) or []
            rows = [StageRow(**known_fields(StageRow, row)) for row in stages]
            return cls(**known_fields(cls, data), stages=rows)
        except TypeError as error:
            raise RecipeError(f"{run_dir}/{SUMMARY_FILE} is incomplete ({error}). {fix}") from None


def relative_to(path: str | Path, folder: Path) -> str:
    """`path` relative to `folder` (the way records store paths the engine made)."""
    return os.path.relpath(Path(path).resolve(), folder.resolve())


def _resolve(path: str | None, folder: Path) -> str | None:
    if path is None or Path(path).is_absolute() or not _looks_local(path, folder):
        return path
    return str((folder / path).resolve())


def _looks_local(path: str, folder: Path) -> bool:
    """A relative record path (`../x`, `abc/def`) versus a hub id (`org/name`)."""
    return path.startswith(".") or (folder / path).exists()


def _read_json(path: Path, what: str, fix: str) -> JsonObject:
    if not path.is_file():
        raise RecipeError(f"{what} (no {path.name}). {fix}")
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise RecipeError(f"{path} is corrupt ({error}). {fix}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path} is corrupt (not a JSON object). {fix}")
    data.setdefault("schema_version", 0)
    return data
