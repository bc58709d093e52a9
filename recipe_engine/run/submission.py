"""A plan whose launcher has a scheduler, submitted (`launchers.kinds.LauncherKind.submit`):
what only `run` knows is handed to the launcher (the store's answers, the MLflow run the
stages' runs nest under, opened when the launcher asks). A launcher that waits for its stages
(Ray) ends the run here as a local run ends: its stages' results read from the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from recipe_engine.capabilities import StageCode
from recipe_engine.errors import StageFailed
from recipe_engine.launchers.kinds import JobPhase, JobState, Submission
from recipe_engine.launchers.records import SubmittedJob
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.run import mlflow_tracking
from recipe_engine.run.mlflow_tracking import TrackedRun
from recipe_engine.store.store import Store


def submit_recipe(plan: RecipePlan, args: Sequence[str], run_dir: Path) -> list[SubmittedJob]:
    """Every job of the plan, in graph order, each after its parent's; recorded in the run
    folder before this returns (a launcher that waits returns when they ended)."""
    store = Store(plan.config.output_root)
    opened: list[TrackedRun] = []
    submission = Submission(
        recipe=plan.recipe,
        config=plan.config,
        jobs=plan.jobs,
        keys={name: stage.fingerprint for name, stage in plan.stages.items()},
        args=tuple(args),
        run_dir=run_dir,
        open_tracking_parent=lambda: _mlflow_parent(plan, run_dir, opened),
        stored=store.is_complete,
        claims=StageClaims(store),
    )
    kind = launcher_kind(plan.config.launcher)
    try:
        jobs = kind.submit(submission)
    except BaseException:
        for run in opened if kind.waits else []:
            mlflow_tracking.close_run(run, failed=True)
        raise
    if kind.waits:
        states = kind.job_states(run_dir, jobs)
        failed = [job for job in jobs if states[job.job_id].phase is not JobPhase.COMPLETED]
        for run in opened:
            mlflow_tracking.close_run(run, failed=bool(failed))
        if failed:
            raise StageFailed(_failures(jobs, failed, states))
    return jobs


def stage_code(plan: RecipePlan, names: Sequence[str]) -> list[StageCode]:
    """The user's code the named stages run, as the plan keyed it (a node must find it)."""
    return [code for name in names for code in plan.stages[name].code]


def job_arguments() -> list[str]:
    """The command line of the Hydra job running now, as its stages' processes take it: its
    config folders (`--config-dir`) and its overrides (a sweep job's own values)."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    folders = [p.removeprefix("file://") for p in hydra.searchpath if p.startswith("file://")]
    return [*(f"--config-dir={folder}" for folder in folders), *hydra.overrides.task]


def _failures(
    jobs: list[SubmittedJob], failed: list[SubmittedJob], states: dict[str, JobState]
) -> str:
    """One message: the stage that failed and why, and those it left unrun."""
    ended = [job for job in failed if states[job.job_id].phase is not JobPhase.CANCELLED]
    first = (ended or failed)[0]
    state = states[first.job_id]
    unrun = [job.stage for job in failed if job is not first]
    left = f"; not run because of it: {', '.join(unrun)}" if unrun else ""
    return (
        f"stage {first.stage} did not commit on the cluster ({state.said}: {state.reason}); "
        f"its log: {first.log}{left}. `runs jobs` lists every stage; the same command runs "
        "what is left."
    )


class StageClaims:
    """The stages this run has on a cluster (`launchers.kinds.Claims`), each claimed in the
    store while its task runs (`Store.claim`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.held: dict[str, FileLock] = {}

    def claim(self, key: str) -> bool:
        if _locked(self.store.lock(key)):  # training now: a local run, a SLURM job
            return False
        claim = self.store.claim(key)
        try:
            claim.acquire()
        except Timeout:  # another run has it on a cluster
            return False
        self.held[key] = claim
        return True

    def release(self, key: str) -> None:
        claim = self.held.pop(key, None)
        if claim is not None:
            claim.release()


def _locked(lock: FileLock) -> bool:
    """Whether another process holds `lock`."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def _mlflow_parent(plan: RecipePlan, run_dir: Path, opened: list[TrackedRun]) -> str | None:
    """The MLflow run every stage job's run nests under, opened here when a stage reports to
    MLflow (the jobs run apart: none of them is the recipe's run). A launcher that waits
    closes it with the run's outcome; otherwise it stays open: no job knows it is the last,
    and each stage's own run carries its outcome."""
    if not any(mlflow_tracking.reports_to_mlflow(stage) for stage in plan.stages.values()):
        return None
    run = mlflow_tracking.open_recipe_run(plan, run_dir)
    opened.append(run)
    return run.run_id
