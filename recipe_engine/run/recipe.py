"""Run a planned recipe: each stage in order, trained, evaluated or reused from the store.

`run_recipe` executes a `RecipePlan` and writes the run folder's `summary.json`; printing
and reports are the caller's (the `run` verb).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.dag import short
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.resolve.hub_revisions import pin_revisions, pins_path
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.run import mlflow_tracking
from recipe_engine.run.disk_space import full_disk_is_one_message
from recipe_engine.run.mlflow_tracking import TrackedRun
from recipe_engine.run.submission import job_arguments, submit_recipe
from recipe_engine.store.metric_text import eval_text
from recipe_engine.store.records import (
    SUMMARY_FILE,
    Difference,
    Manifest,
    RunSummary,
    StageRow,
    relative_to,
)
from recipe_engine.store.store import Store

log = logging.getLogger("recipe_engine")


@dataclass
class StageResult:
    name: str
    status: str  # trained | evaluated | cached
    output: Path
    manifest: Manifest | None  # None on ranks other than 0
    # A reused stage trained on another platform: how that one differs from this one (its
    # value first); retraining the key here may give other weights.
    other_platform: list[Difference] = field(default_factory=list)
    # The stage's MLflow run (rank 0, when its report_to names mlflow).
    mlflow_run: TrackedRun | None = None


def run_recipe(plan: RecipePlan, run_dir: Path) -> list[StageResult]:
    """Every stage this run covers, in order (on the cluster a launcher that waits drives);
    rank 0 then writes the run summary."""
    store = Store(plan.config.output_root)
    names = stages_to_run(plan, store)
    if is_main_process():
        pin_hub_revisions(plan, names)
    if launcher_kind(plan.config.launcher).scheduled:
        results = _run_on_cluster(plan, names, store, run_dir)
    else:
        results = _run_here(plan, names, store, run_dir)
    if is_main_process():
        run_summary(plan, results, run_dir).save(run_dir)
    return results


def _run_on_cluster(
    plan: RecipePlan, names: list[str], store: Store, run_dir: Path
) -> list[StageResult]:
    """The plan's pending stages submitted to the launcher, which waits for them; then every
    stage's result read from the store, with the status its own run on its node recorded
    (trained, evaluated; cached where it was not run, or another run committed it first)."""
    submit_recipe(plan, job_arguments(), run_dir)
    results = []
    for name in names:
        entry = store.entry(plan.stages[name].fingerprint)
        status = _stage_run_status(run_dir / name, name)
        results.append(StageResult(name, status, entry, Manifest.load(entry, stage=name)))
    return results


def _stage_run_status(stage_dir: Path, name: str) -> str:
    """The status a stage's own run (in `<run folder>/<stage>/`) gave it; "cached" when no
    run of it was needed."""
    if not (stage_dir / SUMMARY_FILE).is_file():
        return "cached"
    rows = RunSummary.load(stage_dir).stages
    return next((row.status.split()[0] for row in rows if row.stage == name), "cached")


def _run_here(plan: RecipePlan, names: list[str], store: Store, run_dir: Path) -> list[StageResult]:
    """Every stage in this process, in order, each in its MLflow run where it reports to
    MLflow (nested under the recipe's)."""
    tracked = [n for n in names if mlflow_tracking.reports_to_mlflow(plan.stages[n])]
    parent = None
    if tracked and is_main_process():  # only rank 0 logs
        parent = mlflow_tracking.open_recipe_run(plan, run_dir)
    try:
        results = [_run_tracked(plan, store, name, run_dir, parent) for name in names]
    except BaseException:
        if parent is not None:
            mlflow_tracking.close_run(parent, failed=True)
        raise
    if parent is not None:
        mlflow_tracking.close_run(parent, failed=bool(incomplete(results)))
    return results


def _run_tracked(
    plan: RecipePlan, store: Store, name: str, run_dir: Path, parent: TrackedRun | None
) -> StageResult:
    """`run_or_reuse`, inside the stage's own MLflow run when it reports to MLflow: opened
    here, handed to the Trainer's callback, given the outcome and closed."""
    stage = plan.stages[name]
    if parent is None or not mlflow_tracking.reports_to_mlflow(stage):
        return run_or_reuse(plan, stage, store, run_dir=run_dir)
    child = mlflow_tracking.open_stage_run(parent, plan, stage)
    try:
        with mlflow_tracking.training_into(child):
            result = run_or_reuse(plan, stage, store, run_dir=run_dir)
    except BaseException:
        mlflow_tracking.close_run(child, failed=True)
        raise
    mlflow_tracking.finish_stage_run(child, result.status, result.manifest)
    result.mlflow_run = child
    return result


def stages_to_run(plan: RecipePlan, store: Store) -> list[str]:
    """Stages of this run in order: `only` narrows them, but never to a stage whose parent
    has no stored output (the error names what to run first)."""
    names = _selected(plan, store)
    for name in names:
        unavailable = plan.stages[name].init.unavailable
        if unavailable and not store.is_complete(plan.stages[name].fingerprint):
            raise RecipeError(unavailable, key=f"stage.{name}.init")
    return names


def pin_hub_revisions(plan: RecipePlan, names: list[str]) -> None:
    """Pin the commits this run loads hub models and hub data at (those without a revision,
    resolved by the plan), before any stage trains: a later plan keys and loads the same
    commit even if the branch moves, so an interrupted stage resumes and a finished one is
    reused."""
    stages = [plan.stages[n] for n in names]
    revisions = [r for s in stages for r in (s.init.hub_revision, s.data.hub_revision) if r]
    root = plan.config.output_root
    for pin in pin_revisions(root, revisions):
        log.info("pinned hub %s %s at %s (%s)", pin.kind, pin.repo_id, pin.commit, pins_path(root))


def _selected(plan: RecipePlan, store: Store) -> list[str]:
    only = set(plan.config.only)
    if not only:
        return list(plan.graph.order)
    for name in plan.graph.order:
        if name in only:
            continue
        needed_by = sorted(w for w in only if name in plan.graph.needs(w))
        if needed_by and not store.is_complete(plan.stages[name].fingerprint):
            raise RecipeError(
                f"`only` skips stage `{name}`, but it has no stored output and "
                f"{', '.join(needed_by)} start(s) from it (or learn from it). Run it first: "
                f"only=[{name}] (or drop `only`).",
                key="only",
            )
    # Skipped stages still appear when stored, so the summary maps every stage to its output.
    return [
        n for n in plan.graph.order if n in only or store.is_complete(plan.stages[n].fingerprint)
    ]


def run_or_reuse(plan: RecipePlan, stage: StagePlan, store: Store, *, run_dir: Path) -> StageResult:
    """A stored stage is reused unless forced; otherwise it trains (or evaluates) now, its
    trackers logging into `run_dir` (the run's folder)."""
    # A concurrent job training the same stage finishes first. Ranks of one job train
    # together, so only rank 0 takes the lock.
    force = stage.name in plan.config.force
    with store.lock(stage.fingerprint) if is_main_process() else nullcontext():
        entry = store.entry(stage.fingerprint)
        if store.is_complete(stage.fingerprint) and not force:
            log.info("stage %s: cached at %s", stage.name, entry)
            manifest = Manifest.load(entry, stage=stage.name)
            elsewhere = _platform_change(plan, stage, manifest)
            return StageResult(stage.name, "cached", entry, manifest, other_platform=elsewhere)
        # Imported here: loading torch and transformers costs seconds a cached rerun never needs.
        from recipe_engine.run.evaluation_stage import EvaluationRecipe
        from recipe_engine.run.stage import StageRecipe

        if stage.evaluate_only:
            manifest = EvaluationRecipe(plan, stage, store).run()
            return StageResult(stage.name, "evaluated", entry, manifest)
        fresh = plan.config.fresh or force
        with full_disk_is_one_message(stage.name, store.root):
            manifest = StageRecipe(plan, stage, store, fresh=fresh, run_dir=run_dir).run()
        return StageResult(stage.name, "trained", entry, manifest)


def _platform_change(plan: RecipePlan, stage: StagePlan, manifest: Manifest) -> list[Difference]:
    """How the platform a stored stage trained on differs from the one it would train on here
    (nothing when its manifest predates platforms)."""
    if manifest.platform is None:
        return []
    from recipe_engine.run.machine import remembered_platform

    deterministic = stage.determinism.deterministic_kernels
    here = remembered_platform(stage.placement.device, deterministic=deterministic)
    return manifest.platform.differences(here) if here else []


def _evaluation_failed(result: StageResult) -> bool:
    return bool(result.manifest and result.manifest.metrics.evaluation_error)


def incomplete(results: list[StageResult]) -> list[str]:
    """What this run left undone (an evaluation that failed), one line per stage."""
    return [
        f"stage `{r.name}`: {r.manifest.metrics.evaluation_error} (its weights are committed "
        f"at {r.output}; `python -m recipe_engine compare` evaluates it again)"
        for r in results
        if r.manifest and r.manifest.metrics.evaluation_error
    ]


def _status(result: StageResult) -> str:
    """ "cached", "cached (trained on another platform: cpu capability, threads)", ..."""
    status = result.status
    if result.other_platform:
        names = ", ".join(difference.name for difference in result.other_platform)
        status += f" (trained on another platform: {names})"
    return status + (", evaluation failed" if _evaluation_failed(result) else "")


def run_summary(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> RunSummary:
    return RunSummary(plan.recipe, [_row(plan, result, run_dir) for result in results])


def _row(plan: RecipePlan, result: StageResult, run_dir: Path) -> StageRow:
    stage, manifest = plan.stages[result.name], result.manifest
    metrics = manifest.metrics if manifest else None
    return StageRow(
        stage=result.name,
        status=_status(result),
        key=short(stage.fingerprint),
        init=stage.init.description,
        output=relative_to(result.output, run_dir),
        trained=manifest.trained_text() if manifest else "-",
        steps=metrics.steps if metrics and metrics.steps is not None else "-",
        loss=metrics.loss_text() if metrics else "-",
        eval=eval_text(manifest) if manifest else "-",
        time_s=round(manifest.timings.get("total_s", 0.0), 1) if manifest else 0.0,
    )
