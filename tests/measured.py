"""A comparison measured by hand (`store.scores.Measured`): two stages, two probes, no model
loaded, for the tests of what is written and rendered from it."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.store.records import Manifest, StageMetrics
from recipe_engine.store.scores import Generation, Measured, ModelMetrics, Probe, TaskMetrics
from recipe_engine.store.stage_records import QuantizationFacts

RECIPE = "r3-two-stage"


def stage_manifest(name: str, *, parent: str | None = None, **quantization) -> Manifest:
    metrics = StageMetrics(eval_accuracy=0.5, eval_loss=1.25, base_accuracy=0.25)
    return Manifest(
        name, RECIPE, "f" * 64, "full", {"kind": "vlm"}, "float32", parent=parent,
        quantization=QuantizationFacts(**quantization), metrics=metrics,
    )  # fmt: skip


def measured(run_dir: Path) -> Measured:
    """Base, `vision` (full precision) and `llm` (4-bit) on two probes with references."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stages = [
        ("vision", run_dir / "vision", stage_manifest("vision")),
        ("llm", run_dir / "llm", stage_manifest("llm", parent="vision", bits="4bit")),
    ]
    probes = [
        Probe({}, "red circle", "What is it?", "a.png"),
        Probe({}, "blue square", "And this | one?", "b.png"),
    ]
    outputs = {
        "base": ["green", "blue"],
        "vision": ["red circle", "blue"],
        "llm": ["red circle", "a blue square"],
    }
    metrics = {
        "base": ModelMetrics(2, TaskMetrics(0.0, 0.0), 3.0, loss_measured=True),
        "vision": ModelMetrics(2, TaskMetrics(0.5, 0.5), 2.0, loss_measured=True),
        "llm": ModelMetrics(2, TaskMetrics(0.5, 1.0), 1.0, loss_measured=True),
    }
    generation = Generation(max_new_tokens=8, seed=0)
    return Measured(
        run_dir, RECIPE, stages, probes, "held-out split of data `shapes`", outputs, metrics,
        generation,
    )  # fmt: skip
