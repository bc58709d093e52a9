"""A comparison measured by hand (`evaluate.probing.Measured`): two stages, two probes, no model
loaded, for the tests of what is written and rendered from it."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.store.records import Manifest, StageMetrics
from recipe_engine.store.scores import Measured
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
    rows = [
        {"input": "What is it?", "image": "a.png", "reference": "red circle"},
        {"input": "And this | one?", "image": "b.png", "reference": "blue square"},
    ]
    outputs = {
        "base": ["green", "blue"],
        "vision": ["red circle", "blue"],
        "llm": ["red circle", "a blue square"],
    }
    metrics = {
        "base": {"n": 2, "exact_match": 0.0, "contains": 0.0, "eval_loss": 3.0},
        "vision": {"n": 2, "exact_match": 0.5, "contains": 0.5, "eval_loss": 2.0},
        "llm": {"n": 2, "exact_match": 0.5, "contains": 1.0, "eval_loss": 1.0},
    }
    generation = {"max_new_tokens": 8}
    return Measured(
        run_dir, RECIPE, stages, rows, "held-out split of data `shapes`", outputs, metrics,
        0, generation,
    )  # fmt: skip
