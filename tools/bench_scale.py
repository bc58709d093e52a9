"""The shipped recipes at the user's scale (`make bench-scale`): models with the published
dimensions of real families (`tools.scale_models`: Qwen2-VL-2B, Qwen2.5-0.5B; random seeded
weights, bfloat16, offline), the shapes task's pictures at a real size, a few steps of each
recipe as a user runs it (`python -m recipe_engine ...`, one process each), then one table: per
stage the wall time of each phase (plan, load, handoff, a step, commit, evaluation), the planned
and the measured peak memory, and the bytes it stored.

    python -m tools.bench_scale [--runs r3-two-stage@qwen2-vl-2b,...]
        [--steps 2] [--batch 2] [--image-px 448] [--device cpu] [--depth N] [--attention A]
        [--set KEY=VALUE ...] [--out FILE.json] [--work DIR]
    python -m tools.bench_scale --dry-run   # plans every run, builds no model

A family that ties lm_head to its embeddings (Qwen2-VL-2B, Qwen2.5-0.5B) has a stage that
freezes the embeddings freeze lm_head with them: what `plan`'s refusal of the templates'
trained lm_head tells a user to do. On a GPU (`--device cuda`) the table adds training
tokens/s and MFU (the Trainer's tokens against 6 N FLOPs a token and the card's dense bf16
peak).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recipe_engine.config.compose import compose_config
from recipe_engine.files import default_cache_dir
from recipe_engine.resolve.tiny import build_dataset
from recipe_engine.resolve.tiny.build import build_once
from recipe_engine.tables import text_table
from tools.scale_models import SCALE_MODELS, Variant, build_scale_model

DEFAULT_RUNS = ("r3-two-stage@qwen2-vl-2b", "r1-llm-only@qwen2-vl-2b", "text-lora@qwen2.5-0.5b")
# The shapes task's rows taken, train and held out: enough for a few steps and eight probes.
TRAIN_ROWS, EVAL_ROWS = 64, 16
DATA_VERSION = "v1"
# A stage's timed phases (its manifest's `timings`, `<phase>_s`), in the order they run.
PHASES = ("merge", "load", "trainer", "preflight", "train", "commit", "eval")
# Dense bf16 tensor-core peak, TFLOP/s, by the name torch gives the card (the GPU report's).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


@dataclass(frozen=True)
class Run:
    """One recipe on one scale model (`recipe@model`)."""

    recipe: str
    model: str

    @classmethod
    def parse(cls, text: str) -> Run:
        recipe, _, model = text.partition("@")
        if model not in SCALE_MODELS:
            raise SystemExit(f"{text}: the model after @ is one of {', '.join(SCALE_MODELS)}")
        return cls(recipe, model)

    @property
    def name(self) -> str:
        return f"{self.recipe}@{self.model}"


@dataclass(frozen=True)
class Settings:
    steps: int = 2
    batch: int = 2
    image_px: int = 448
    device: str = "cpu"
    variant: Variant = Variant()
    eval_samples: int = 8
    extra: tuple[str, ...] = ()  # more overrides for every run (`--set`), e.g. packing
    hardware: str | None = None  # a hardware profile to plan for (a dry run off the machine)
    # The built model's `model.dtype`: auto is the engine's choice (bfloat16, or float32 for a
    # CPU stage on a CPU that emulates bfloat16, where it fits), what a user gets by default.
    dtype: str = "auto"


@dataclass
class StageRow:
    """One stage of a run, as the table prints it (seconds, GiB, GB)."""

    run: str
    stage: str
    status: str
    load_s: float | None = None
    merge_s: float | None = None
    trainer_s: float | None = None  # TRL's trainer built (its data prepared)
    preflight_s: float | None = None  # the preflight batch and generation, before step 0
    step_s: float | None = None
    commit_s: float | None = None
    eval_s: float | None = None
    rest_s: float | None = None  # the stage's total less the phases above (steps: all of them)
    planned_gib: float | None = None
    measured_gib: float | None = None
    stored_gb: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None

    @property
    def error(self) -> float | None:
        """The plan's error against the measured peak, in % (negative: planned under)."""
        if not self.planned_gib or not self.measured_gib:
            return None
        return 100 * (self.planned_gib / self.measured_gib - 1)


@dataclass
class RunResult:
    run: str
    exit_code: int
    plan_s: float
    wall_s: float
    notes: list[str] = field(default_factory=list)
    stages: list[StageRow] = field(default_factory=list)


def scale_shapes(image_px: int, cache_dir: Path | None = None) -> Path:
    """The shapes task's first rows, their pictures resized to `image_px` a side, as a folder of
    train.jsonl and eval.jsonl (a user's files); built once."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "scale" / "data" / f"shapes-{image_px}px-{DATA_VERSION}"
    return build_once(folder, lambda target: _resize_shapes(image_px, target))


def _resize_shapes(image_px: int, target: Path) -> None:
    from PIL import Image

    source = build_dataset("shapes")
    (target / "images").mkdir(parents=True)
    for split, count in (("train", TRAIN_ROWS), ("eval", EVAL_ROWS)):
        rows = [json.loads(line) for line in (source / f"{split}.jsonl").open()][:count]
        for row in rows:
            for path in row["images"]:
                picture = Image.open(source / path).convert("RGB")
                picture.resize((image_px, image_px), Image.Resampling.BICUBIC).save(target / path)
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (target / f"{split}.jsonl").write_text(text)


def overrides(run: Run, settings: Settings, model_dir: Path | None, root: Path) -> list[str]:
    """The run's command line: the scale model (its built folder, or in a dry run its hub
    entry, planned from the shipped snapshot), a few steps of each stage at `batch`, its data
    at real image sizes (VLMs), tied embeddings frozen with lm_head."""
    model = SCALE_MODELS[run.model]
    if model_dir is None:
        chosen = [f"model={run.model}"]
    else:
        chosen = [f"model.name={run.model}", "model.source=local", f"model.id={model_dir}",
                  f"model.kind={model.kind}", f"model.dtype={settings.dtype}"]  # fmt: skip
    data = []
    if model.kind == "vlm":
        path = scale_shapes(settings.image_px) / "train.jsonl"
        data = ["data.source=local", f"data.path={path}", f"data.name=shapes-{settings.image_px}px"]
    hardware = [f"hardware={settings.hardware}"] if settings.hardware else []
    base = [f"recipe={run.recipe}", *chosen, *data, f"device={settings.device}", *hardware]
    stages = compose_config(base).stage
    per_stage = []
    for name, stage in stages.items():
        per_stage += [
            f"++stage.{name}.train.max_steps={settings.steps}",
            f"stage.{name}.train.per_device_train_batch_size={settings.batch}",
        ]
        frozen = list(stage.freeze.components)
        if model.tied and "embeddings" in frozen and "lm_head" not in frozen:
            per_stage.append(f"stage.{name}.freeze.components=[{','.join([*frozen, 'lm_head'])}]")
    tail = [f"eval.max_samples={settings.eval_samples}", *settings.extra, f"output_root={root}"]
    return [*base, *per_stage, *tail]


def run_one(run: Run, settings: Settings, out: Path, *, dry: bool) -> RunResult:
    """The run (or in a dry run its plan alone), in processes of its own, read back."""
    model_dir = None if dry else build_scale_model(run.model, settings.variant)
    root = out / run.name.replace("@", "-")
    args = overrides(run, settings, model_dir, root)
    plan_s, planned = _timed([sys.executable, "-m", "recipe_engine", "plan", *args])
    print(f"$ python -m recipe_engine {' '.join(args)}", flush=True)
    notes = plan_notes(planned.stdout, dry=dry)
    if SCALE_MODELS[run.model].tied and any(".freeze.components=" in arg for arg in args):
        notes.append(f"{run.model} ties lm_head to its embeddings: frozen with them")
    variant = settings.variant
    if dry and variant.suffix:  # the plan has no key for these: only the built config says them
        depth = f"{variant.depth} layers" if variant.depth else ""
        attention = f"attn_implementation {variant.attention}" if variant.attention else ""
        built = ", ".join(filter(None, (depth, attention)))
        notes.append(f"planned as the family publishes it, not as built ({built})")
    if dry or planned.returncode:
        return RunResult(run.name, planned.returncode, plan_s, 0.0,
                         notes=[*notes, *_refusal(planned)])  # fmt: skip
    wall_s, done = _timed([sys.executable, "-m", "recipe_engine", *args])
    result = RunResult(run.name, done.returncode, plan_s, wall_s, notes=[*notes, *_refusal(done)])
    result.stages = stage_rows(run.name, root, settings)
    return result


def plan_notes(plan_output: str, *, dry: bool) -> list[str]:
    """What the table says of a run from its plan: the visual tokens per image its processor
    gives the data's pictures (each distinct `images:` line) and, in a dry run, each stage's
    estimate (its `memory:` line)."""
    lines = [" ".join(line.split()) for line in plan_output.splitlines()]
    memory = [line for line in lines if line.startswith("memory:")] if dry else []
    return [*memory, *dict.fromkeys(line for line in lines if line.startswith("images:"))]


def _refusal(done: subprocess.CompletedProcess) -> list[str]:
    """A failed command's last word (the engine's one-line error, or a traceback's last line,
    on stderr), or nothing when it succeeded."""
    if not done.returncode:
        return []
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return [said[-1].strip()] if said else [f"exit {done.returncode}"]


def _timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - started, done


def stage_rows(run: str, root: Path, settings: Settings) -> list[StageRow]:
    """Every stage the run stored, from its manifest and its store folder."""
    rows = []
    for path in sorted((root / "store").glob("*/manifest.json"), key=lambda p: p.stat().st_mtime):
        manifest = json.loads(path.read_text())
        metrics, timings = manifest.get("metrics") or {}, manifest.get("timings") or {}
        steps = metrics.get("steps") or 0
        tokens = _trained_tokens(path.parent)
        row = StageRow(
            run,
            manifest["stage"],
            "evaluation failed" if metrics.get("evaluation_error") else "trained",
            load_s=timings.get("load_s"),
            merge_s=timings.get("merge_s"),
            trainer_s=timings.get("trainer_s"),
            preflight_s=timings.get("preflight_s"),
            step_s=timings["train_s"] / steps if steps and "train_s" in timings else None,
            commit_s=timings.get("commit_s"),
            eval_s=timings.get("eval_s"),
            rest_s=_rest(timings),
            planned_gib=metrics.get("estimated_peak_gib"),
            measured_gib=metrics.get("measured_peak_gib"),
            stored_gb=sum(f.stat().st_size for f in path.parent.rglob("*") if f.is_file()) / 1e9,
        )
        if tokens and "train_s" in timings:
            row.tokens_per_s = tokens / timings["train_s"]
            row.mfu = _mfu(row.tokens_per_s, manifest, settings)
        rows.append(row)
    return rows


def _rest(timings: dict[str, float]) -> float | None:
    """The stage's seconds no phase accounts for (policies, checks, the record)."""
    if "total_s" not in timings:
        return None
    return timings["total_s"] - sum(timings.get(f"{phase}_s", 0.0) for phase in PHASES)


def _trained_tokens(folder: Path) -> float | None:
    """The training tokens the Trainer counted (its last `num_tokens` record)."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return next((float(r["num_tokens"]) for r in reversed(records) if "num_tokens" in r), None)


def _mfu(tokens_per_s: float, manifest: dict, settings: Settings) -> float | None:
    """6 N FLOPs a token (N: every parameter the stage holds) against the card's peak; None on
    a CPU or an unknown card."""
    if settings.device != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    report = manifest.get("trainable_report") or {}
    params = sum(part.get("params", 0) for part in report.values())
    return 6 * params * tokens_per_s / (peak * 1e12) if peak and params else None


def table(results: Sequence[RunResult]) -> list[str]:
    header = ["run", "stage", "status", "plan s", "load s", "handoff s", "trainer s",
              "preflight s", "s/step", "commit s", "eval s", "rest s", "planned GiB",
              "measured GiB", "error", "stored GB", "tokens/s", "MFU"]  # fmt: skip
    rows = []
    for result in results:
        for stage in result.stages:
            rows.append(
                [
                    result.run,
                    stage.stage,
                    stage.status,
                    f"{result.plan_s:.1f}",
                    *(
                        _cell(v, 1)
                        for v in (
                            stage.load_s,
                            stage.merge_s,
                            stage.trainer_s,
                            stage.preflight_s,
                            stage.step_s,
                            stage.commit_s,
                            stage.eval_s,
                            stage.rest_s,
                        )
                    ),
                    _cell(stage.planned_gib, 2),
                    _cell(stage.measured_gib, 2),
                    "-" if stage.error is None else f"{stage.error:+.1f}%",
                    _cell(stage.stored_gb, 2),
                    _cell(stage.tokens_per_s, 0),
                    "-" if stage.mfu is None else f"{stage.mfu:.1%}",
                ]  # fmt: skip
            )
    lines = text_table(rows, header=header)
    for result in results:
        notes = "; ".join(n for n in result.notes if n)
        said = f" ({notes})" if notes else ""
        lines.append(f"{result.run}: exit {result.exit_code}, plan {result.plan_s:.1f} s, "
                     f"whole run {result.wall_s:.0f} s{said}")  # fmt: skip
    return lines


def summary(results: Sequence[RunResult]) -> str:
    """One line: each stage's planned against measured peak, and its training rate."""
    parts = []
    for result in results:
        for stage in result.stages:
            error = "" if stage.error is None else f" ({stage.error:+.1f}%)"
            rate = f", {stage.tokens_per_s:,.0f} tokens/s" if stage.tokens_per_s else ""
            mfu = f", MFU {stage.mfu:.1%}" if stage.mfu is not None else ""
            parts.append(f"{result.run} {stage.stage}: planned {_cell(stage.planned_gib, 2)} GiB, "
                         f"measured {_cell(stage.measured_gib, 2)}{error}{rate}{mfu}")  # fmt: skip
        if not result.stages:  # a dry run: what the plan says
            planned = ", ".join(" ".join(note.split()) for note in result.notes)
            parts.append(
                f"{result.run}: exit {result.exit_code}{f' ({planned})' if planned else ''}"
            )
    return "; ".join(parts)


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_scale")
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="recipe@model, ...")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps a stage")
    parser.add_argument("--batch", type=int, default=2, help="rows a step")
    parser.add_argument("--image-px", type=int, default=448, help="the pictures' side")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (the engine's device=)")
    parser.add_argument("--depth", type=int, help="cut the models' layers to N (widths kept)")
    parser.add_argument("--attention", help="the attn_implementation the models' config names")
    parser.add_argument("--eval-samples", type=int, default=8, help="held-out rows asked")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every run (repeatable)")  # fmt: skip
    parser.add_argument("--hardware", help="a hardware profile (e.g. a dry run for a GPU)")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "bfloat16", "float32"),
        help="the model's dtype (auto: the engine's choice for the device)",
    )
    parser.add_argument("--out", type=Path, help="the table as JSON")
    parser.add_argument("--work", type=Path, help="where the runs write (default: a temp dir)")
    parser.add_argument("--dry-run", action="store_true", help="plan every run; build no model")
    options = parser.parse_args(argv)
    runs = [Run.parse(text) for text in options.runs.split(",")]
    variant = Variant(options.depth, options.attention, options.device)
    settings = Settings(options.steps, options.batch, options.image_px, options.device, variant,
                        options.eval_samples, tuple(options.set), options.hardware,
                        options.dtype)  # fmt: skip
    work = options.work or Path(default_cache_dir()) / "scale" / "runs"
    results = []
    for run in runs:
        shutil.rmtree(work / run.name.replace("@", "-"), ignore_errors=True)
        results.append(run_one(run, settings, work, dry=options.dry_run))
    print("\n".join(table(results)))
    print(summary(results))
    if options.out:
        records = [asdict(result) for result in results]
        options.out.write_text(json.dumps({"settings": asdict(settings), "runs": records},
                                          indent=2) + "\n")  # fmt: skip
    return max((result.exit_code for result in results), default=0)


if __name__ == "__main__":
    sys.exit(main())
