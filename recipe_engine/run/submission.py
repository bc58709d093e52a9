"""A plan whose launcher has a scheduler, submitted (`launchers.kinds.LauncherKind.submit`):
what only `run` knows is handed to the launcher, the MLflow run the stages' runs nest under,
opened when the launcher asks."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.launchers.kinds import Submission
from recipe_engine.launchers.records import SubmittedJob
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.run import mlflow_tracking


def submit_recipe(plan: RecipePlan, args: list[str], run_dir: Path) -> list[SubmittedJob]:
    """Every job of the plan, in graph order, each after its parent's; recorded in the run
    folder before this returns."""
    submission = Submission(
        recipe=plan.recipe,
        config=plan.config,
        jobs=plan.jobs,
        keys={name: stage.fingerprint for name, stage in plan.stages.items()},
        args=tuple(args),
        run_dir=run_dir,
        open_tracking_parent=lambda: _mlflow_parent(plan, run_dir),
    )
    return launcher_kind(plan.config.launcher).submit(submission)


def _mlflow_parent(plan: RecipePlan, run_dir: Path) -> str | None:
    """The MLflow run every stage job's run nests under, opened here when a stage reports to
    MLflow (the jobs run apart: none of them is the recipe's run). It stays open: no job
    knows it is the last, and each stage's own run carries its outcome."""
    if not any(mlflow_tracking.reports_to_mlflow(stage) for stage in plan.stages.values()):
        return None
    return mlflow_tracking.open_recipe_run(plan, run_dir).run_id
