"""What a finished run prints: the stage table, the loss plot and the base-vs-stages compare."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.run.recipe import StageResult, run_summary
from recipe_engine.tables import text_table

# The summary's columns the table prints (the store paths are in summary.json).
COLUMNS = ("stage", "status", "key", "init", "trained", "steps", "loss", "eval", "time_s")


def report_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> list[str]:
    """Print the run's table, plot and comparison; return what could not be reported."""
    print(run_table(plan, results, run_dir))
    from recipe_engine.report.plots import MISSING, write_loss_plot

    plot = write_loss_plot(run_dir, [(r.name, r.output / "metrics.jsonl") for r in results])
    print(f"loss plot: {plot or MISSING}")
    settings = plan.config.eval
    if not (results and settings.enabled and settings.compare):
        return []
    if all(r.status == "cached" for r in results):
        print(f"all stages cached; to compare them: python -m recipe_engine compare run={run_dir}")
        return []
    from recipe_engine.report.compare import compare_run

    try:
        compared = compare_run(
            run_dir,
            settings=dataclasses.asdict(settings),
            seed=plan.config.seed,
            held_out=_held_out(plan, results),
        )
    except Exception as error:  # the stages are committed: a failed report loses nothing
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return [f"the compare report failed ({first}); try: compare run={run_dir}"]
    print(compared["table"])
    print(f"compare report: {compared['report']}")
    return []


def _held_out(plan: RecipePlan, results: list[StageResult]) -> Any:
    """The rows the run already read for the stage `compare` probes with (its root)."""
    stages = [plan.stages[r.name] for r in results if not plan.stages[r.name].evaluate_only]
    root = next((s for s in stages if s.parent is None), stages[0])
    return root.data.splits().eval


def run_table(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str:
    rows = [dataclasses.asdict(row) for row in run_summary(plan, results, run_dir).stages]
    lines = [f"recipe {plan.recipe}: run folder {run_dir}"]
    if rows:
        lines += text_table([[str(row[c]) for c in COLUMNS] for row in rows], header=COLUMNS)
    lines += _accuracy_line(results)
    return "\n".join(lines)


def _accuracy_line(results: list[StageResult]) -> list[str]:
    metrics: list[Any] = [r.manifest.metrics for r in results if r.manifest]
    base = next((m.base_accuracy for m in metrics if m.base_accuracy is not None), None)
    final = metrics[-1].eval_accuracy if metrics else None
    if base is None or final is None:
        return []
    name = results[-1].name
    return [f"held-out exact match: base {base:.0%} -> final stage `{name}` {final:.0%}"]
