"""What a finished run prints: the stage table and the loss plot (the base-vs-stages compare is
`report.compare`'s, from the records `evaluate` wrote)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.report.plots import PlotStage
from recipe_engine.run.recipe import StageResult, run_summary
from recipe_engine.store.metric_text import accuracy_text
from recipe_engine.store.records import StageRow, differences_text
from recipe_engine.tables import text_table

# The summary's columns the table prints (the store paths are in summary.json).
COLUMNS = ("stage", "status", "key", "init", "trained", "steps", "loss", "eval", "time_s")


def print_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> None:
    """Print the run's table and write its loss plot (the comparison is measured by
    `evaluate.after_run` and rendered by `report.compare`: the run verb asks both)."""
    print(run_table(plan, results, run_dir))
    from recipe_engine.report.plots import MISSING, write_loss_plot

    plot = write_loss_plot(run_dir, plot_stages(plan, results))
    print(f"loss plot: {plot or MISSING}")


def run_table(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str:
    rows = run_summary(plan, results, run_dir).stages
    lines = [f"recipe {plan.recipe}: run folder {run_dir}"]
    if rows:
        cells = [[_cell(row, c) for c in COLUMNS] for row in rows]
        lines += text_table(cells, header=COLUMNS)
    lines += platform_notes(results)
    lines += _accuracy_line(plan, results)
    return "\n".join(lines)


def platform_notes(results: list[StageResult]) -> list[str]:
    """One line per reused stage that was trained on another platform, naming the change."""
    return [
        f"note: stage `{r.name}` reuses a store entry trained on another platform (there vs "
        f"here: {differences_text(r.other_platform)})"
        for r in results
        if r.other_platform
    ]


def _cell(row: StageRow, column: str) -> str:
    """A cached stage's time is the one recorded when it trained, not this run's: labelled."""
    value = getattr(row, column)  # COLUMNS are StageRow's fields, as summary.json names them
    if column == "time_s" and row.status.startswith("cached"):
        return f"{value} (cached)"
    return str(value)


def plot_stages(plan: RecipePlan, results: list[StageResult]) -> list[PlotStage]:
    """The run's stages for the loss plot, each with the parent it branches from."""
    return [
        PlotStage(r.name, plan.stages[r.name].parent, r.output / "metrics.jsonl") for r in results
    ]


def sinks(plan: RecipePlan, results: list[StageResult]) -> list[StageResult]:
    """The stages the run exists for: the recipe's `targets`, else the stages no other stage
    of this run loads (every child of a fan-out, not just the last one run; not a teacher)."""
    ran = {r.name for r in results}
    targets = [r for r in results if r.name in plan.config.recipe.targets]
    leaves = [r for r in results if not ran.intersection(plan.graph.loaded_by(r.name))]
    return targets or leaves


def _on_rows(plan: RecipePlan, name: str, text: str) -> str:
    """A stage's accuracy, saying so when it was measured on other rows than the base's (a
    DPO stage's held-out pairs, asked for the chosen answer)."""
    roots = [s for s in plan.stages.values() if s.parent is None]
    stage = plan.stages[name]
    if not roots or stage.data.identity == roots[0].data.identity:
        return text
    return f"{text} on its own held-out rows ({stage.data.config.name or stage.data.origin})"


def _accuracy_line(plan: RecipePlan, results: list[StageResult]) -> list[str]:
    metrics: list[Any] = [r.manifest.metrics for r in results if r.manifest]
    base = next((m.base_accuracy for m in metrics if m.base_accuracy is not None), None)
    scored = [(r.name, accuracy_text(r.manifest)) for r in sinks(plan, results) if r.manifest]
    scored = [(name, _on_rows(plan, name, text)) for name, text in scored if text is not None]
    if base is None or not scored:
        return []
    if len(scored) == 1:
        name, text = scored[0]
        return [f"held-out exact match: base {base:.0%} -> final stage `{name}` {text}"]
    finals = ", ".join(f"{name} {text}" for name, text in scored)
    return [f"held-out exact match: base {base:.0%} -> {finals}"]
