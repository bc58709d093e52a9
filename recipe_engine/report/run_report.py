"""What a finished run prints: the stage table, the loss plot and the base-vs-stages compare."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.report.plots import PlotStage
from recipe_engine.run.recipe import StageResult, accuracy_text, platform_notes, run_summary
from recipe_engine.tables import text_table

# What torch.distributed.run sets for each rank; a process without them is a plain one.
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                   "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                   "MASTER_ADDR", "MASTER_PORT")  # fmt: skip
# torchrun's own, and the switches the Trainer sets for DeepSpeed / FSDP (a one-process
# evaluation must not start either).
LAUNCH_PREFIXES = ("TORCHELASTIC_", "ACCELERATE_USE_")
# The summary's columns the table prints (the store paths are in summary.json).
COLUMNS = ("stage", "status", "key", "init", "trained", "steps", "loss", "eval", "time_s")


def report_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> list[str]:
    """Print the run's table, plot and comparison; return what could not be reported."""
    print(run_table(plan, results, run_dir))
    from recipe_engine.report.plots import MISSING, write_loss_plot

    plot = write_loss_plot(run_dir, plot_stages(plan, results))
    print(f"loss plot: {plot or MISSING}")
    settings = plan.config.eval
    if not (results and settings.enabled and settings.compare):
        return []
    probed = _probed(plan, results)
    if probed is not None and not probed.data.eval_rows:  # too few rows, or eval_fraction=0
        print("compare: skipped, the first stage's data holds no rows out to ask (see `plan`)")
        return []
    if all(r.status == "cached" for r in results):
        print(f"all stages cached; to compare them: python -m recipe_engine compare run={run_dir}")
        return []
    if plan.machine.world_size > 1:
        return _compare_in_one_process(run_dir)
    # Measured and written on the run side, rendered here (the `compare` verb does the same).
    from recipe_engine.evaluate.scoring import score_run
    from recipe_engine.report.compare import render_compare

    try:
        scored = score_run(
            run_dir,
            settings=dataclasses.asdict(settings),
            seed=plan.config.seed,
            held_out=probed.data.splits().eval if probed else None,
        )
        compared = render_compare(scored)
    except Exception as error:  # the stages are committed: a failed report loses nothing
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return [f"the compare report failed ({first}); try: compare run={run_dir}"]
    print(compared["table"])
    print(f"compare report: {compared['report']}")
    return []


def _compare_in_one_process(run_dir: Path) -> list[str]:
    """The compare verb on this run, as a process of its own: rank 0 of a distributed run is
    left alone with a process group the other ranks have quit, and the trainer that measures
    each model's held-out loss would wait on them (gloo: "Connection closed by peer")."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in DISTRIBUTED_ENV and not key.startswith(LAUNCH_PREFIXES)
    }
    command = [sys.executable, "-m", "recipe_engine", "compare", f"run={run_dir}"]
    done = subprocess.run(command, env=env, check=False)
    if done.returncode:
        return [f"the compare report failed (exit {done.returncode}); try: compare run={run_dir}"]
    return []


def _probed(plan: RecipePlan, results: list[StageResult]) -> StagePlan | None:
    """The stage whose held-out rows `compare` probes with (its root), rows the run read;
    None when the run only evaluated (`compare` reads the root's manifest)."""
    stages = [plan.stages[r.name] for r in results if not plan.stages[r.name].evaluate_only]
    return next((s for s in stages if s.parent is None), stages[0] if stages else None)


def run_table(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str:
    rows = [dataclasses.asdict(row) for row in run_summary(plan, results, run_dir).stages]
    lines = [f"recipe {plan.recipe}: run folder {run_dir}"]
    if rows:
        cells = [[_cell(row, c) for c in COLUMNS] for row in rows]
        lines += text_table(cells, header=COLUMNS)
    lines += platform_notes(results)
    lines += _accuracy_line(plan, results)
    return "\n".join(lines)


def _cell(row: dict[str, Any], column: str) -> str:
    """A cached stage's time is the one recorded when it trained, not this run's: labelled."""
    if column == "time_s" and str(row["status"]).startswith("cached"):
        return f"{row[column]} (cached)"
    return str(row[column])


def plot_stages(plan: RecipePlan, results: list[StageResult]) -> list[PlotStage]:
    """The run's stages for the loss plot, each with the parent it branches from."""
    return [
        PlotStage(r.name, plan.stages[r.name].parent, r.output / "metrics.jsonl") for r in results
    ]


def sinks(plan: RecipePlan, results: list[StageResult]) -> list[StageResult]:
    """The stages the run exists for: the recipe's `targets`, else the stages no other stage
    of this run starts from (every child of a fan-out, not just the last one run)."""
    ran = {r.name for r in results}
    targets = [r for r in results if r.name in plan.config.recipe.targets]
    leaves = [r for r in results if not ran.intersection(plan.graph.children(r.name))]
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
