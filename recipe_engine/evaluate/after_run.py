"""The end of a run, after `run` returned it (`finish_run`, called by the `run` verb and by an
experiment for each of its runs): its table and plot (`report.run_report`), then its compare:
whether the run that just finished is measured, the measuring itself (the base and every stage
on the held-out rows the run read, written as `compare`'s records by `evaluate.scoring`), and
its rendering (`report.compare`); the plots and model cards on its MLflow runs; then its exit
code (`run.hydra_job.conclude`). After a distributed run the compare runs as a process of its
own.

Importing this loads no model library: `score_after_run` imports the measuring when called.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.report.compare import render_compare
from recipe_engine.report.run_report import print_run
from recipe_engine.resolve.row_shapes import SHAPES
from recipe_engine.run.hydra_job import FinishedRun, Outcome, conclude, failure_code
from recipe_engine.run.recipe import StageResult

if TYPE_CHECKING:
    from recipe_engine.store.scores import Scored


def finish_run(outcome: Outcome, *, artifacts: bool = True) -> int:
    """A finished run reported (its table and compare; with `artifacts`, its plots and model
    cards on its MLflow runs), then ended: its exit code. A run with nothing to report is
    its exit code already."""
    if not isinstance(outcome, FinishedRun):
        return outcome
    plan, results, run_dir = outcome.plan, outcome.results, outcome.run_dir
    try:
        unreported = report_run(plan, results, run_dir)
        if artifacts:
            unreported += track_artifacts(results, run_dir)
    except Exception as error:  # one message, as a failure of the run itself
        return failure_code(error, run_dir)
    return conclude(outcome, unreported)


def track_artifacts(results: list[StageResult], run_dir: Path) -> list[str]:
    """The run's plots (written by `report_run`) on its MLflow recipe run, each stage's model
    card on the stage's run; what failed, as a line (the stages are committed regardless)."""
    tracked = [result for result in results if result.mlflow_run is not None]
    if not tracked:
        return []
    from recipe_engine.report.export_card import stage_card
    from recipe_engine.run import mlflow_tracking

    try:
        parent = mlflow_tracking.parent_of(tracked[0].mlflow_run)
        mlflow_tracking.log_files(parent, sorted(run_dir.glob("*.png")), "plots")
        for result in tracked:
            card = stage_card(result.output)
            if card is not None:
                mlflow_tracking.log_text(result.mlflow_run, card, "model_card/README.md")
    except Exception as error:  # the tracking server's answer: the run itself is done
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return [f"MLflow did not take the run's plots and model cards: {first}"]
    return []


def report_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> list[str]:
    """Print the run's table and plot, then its comparison: measured and written by `evaluate`,
    rendered by `report.compare` (the `compare` verb does the same); return what could not be
    reported."""
    print_run(plan, results, run_dir)
    skipped = compare_skipped(plan, results, run_dir)
    if skipped is not None:
        if skipped:
            print(skipped)
        return []
    if plan.machine.world_size > 1:
        return _compare_in_one_process(run_dir)
    try:
        compared = render_compare(score_after_run(plan, results, run_dir))
    except Exception as error:  # the stages are committed: a failed report loses nothing
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return [f"the compare report failed ({first}); try: compare run={run_dir}"]
    print(compared.table)
    print(f"compare report: {compared.report}")
    return []


# What torch.distributed.run sets for each rank; a process without them is a plain one.
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                   "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                   "MASTER_ADDR", "MASTER_PORT")  # fmt: skip
# torchrun's own, and the switches the Trainer sets for DeepSpeed / FSDP (a one-process
# evaluation must not start either).
LAUNCH_PREFIXES = ("TORCHELASTIC_", "ACCELERATE_USE_")


def _compare_in_one_process(run_dir: Path) -> list[str]:
    """The compare verb on this run, as a process of its own: rank 0 of a distributed run is
    left alone with a process group the other ranks have quit, and the trainer that measures
    each model's held-out loss would wait on them (gloo: "Connection closed by peer")."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in DISTRIBUTED_ENV and not key.startswith(LAUNCH_PREFIXES)
    }
    command = [
        sys.executable,
        "-m",
        "recipe_engine",
        "compare",
        f"run={run_dir}",
        "run_passes=true",
    ]
    done = subprocess.run(command, env=env, check=False)
    if done.returncode:
        return [f"the compare report failed (exit {done.returncode}); try: compare run={run_dir}"]
    return []


def compare_skipped(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str | None:
    """Why the end-of-run compare is not measured, as the line to print ("": nothing to say);
    None when it is measured."""
    settings = plan.config.eval
    if not (results and settings.enabled and settings.compare):
        return ""
    probed = probed_stage(plan, results)
    if probed is not None and not probed.data.eval_rows:  # too few rows, or eval_fraction=0
        return "compare: skipped, the first stage's data holds no rows out to ask (see `plan`)"
    if probed is not None and SHAPES[probed.data.format].asked is None:
        return (
            "compare: skipped, the first stage's rows are language-modeling text, which asks "
            "no question (its held-out loss is in the table above; compare probes=FILE asks "
            "questions of your own)"
        )
    if all(r.status == "cached" for r in results):
        return f"all stages cached; to compare them: python -m recipe_engine compare run={run_dir}"
    return None


def score_after_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> Scored:
    """The base and every stage of the run measured with the run's eval settings and seed, on
    the held-out rows it read (not read again), written as `compare`'s records."""
    from recipe_engine.config.compare import EvalOverrides
    from recipe_engine.evaluate.probing import RunOverrides
    from recipe_engine.evaluate.scoring import score_run

    probed = probed_stage(plan, results)
    overrides = RunOverrides(
        settings=EvalOverrides.every(plan.config.eval),
        seed=plan.config.seed,
        held_out=probed.data.splits().eval if probed else None,
        measured=True,
    )
    return score_run(run_dir, overrides=overrides)


def probed_stage(plan: RecipePlan, results: list[StageResult]) -> StagePlan | None:
    """The stage whose held-out rows `compare` probes with (its root), rows the run read;
    None when the run only evaluated (`compare` reads the root's manifest)."""
    stages = [plan.stages[r.name] for r in results if not plan.stages[r.name].evaluate_only]
    return next((s for s in stages if s.parent is None), stages[0] if stages else None)
