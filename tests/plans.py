"""Shared helpers of the planner tests: a plan on the described CPU machine, a small data file."""

from __future__ import annotations

import csv
from pathlib import Path

from machines import CPU_ONLY

from recipe_engine.config.compose import compose_config
from recipe_engine.run.planning import plan_from_config


def plan(*overrides: str):
    """The plan of these overrides on a CPU-only machine (no detection)."""
    return plan_from_config(compose_config(list(overrides)), CPU_ONLY)


def pairs_csv(folder: Path) -> Path:
    """Eight prompt/completion rows ("a + a?" -> 2a) as a CSV file in `folder`."""
    path = folder / "pairs.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["prompt", "completion"])
        writer.writerows((f"{a} + {a}?", str(2 * a)) for a in range(8))
    return path


def short_text_run(root: Path) -> Path:
    """A finished text-lora run of 2 training steps under `root`: base + one adapter `llm`."""
    from recipe_engine.run.recipe import run_recipe

    overrides = [
        "recipe=text-lora",
        f"output_root={root}",
        "data.max_samples=16",
        "eval.max_samples=2",
        "++stage.llm.train.max_steps=2",
    ]
    run_dir = root / "runs" / "text-lora" / "t1"
    run_recipe(plan_from_config(compose_config(overrides)), run_dir)
    return run_dir
