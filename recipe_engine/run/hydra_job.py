"""One planned recipe run as a Hydra job: the run folder Hydra makes, the plan handed to the job
executed in it, and the exit code of a run that stopped.

Every way a recipe is run goes through here: the `run` verb (one run, or each job of a
multirun through Hydra's launcher) and a recipe-vs-recipe experiment (`evaluate.experiment`,
each recipe and seed one run). So the checks before anything is written
(`refuse_before_writing`) and the devices the plan chose (`use_planned_devices`) are set up in
one place. A job is handed its plan (`job_plan`): the one made up front, or, where the job's
devices are known only where it runs (a scheduled job on its node, a sweep job on the GPU it
leases), one made there, once. `execute` returns a `FinishedRun`; what a finished run reports
(its table, its compare) is measured and rendered above this layer, by the caller, which then
ends the run with `conclude`.

Hydra's public API only: `hydra.core.utils.run_job` (what Hydra's launchers call) runs the job,
with the `hydra.callbacks` the config names instantiated by `hydra.utils.instantiate`
(`JobCallbacks`, what `hydra.main` does for a run).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from recipe_engine.config.compose import CONFIG_NAME, to_engine_config
from recipe_engine.config.schema import HardwareConfig
from recipe_engine.errors import EXIT_INCOMPLETE, EXIT_USER_ERROR, RecipeError, StageFailed
from recipe_engine.plan.hardware import parse_gpus
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.run.gpu_pool import is_scheduler, job_pool, lease_gpu
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import StageResult, incomplete, run_recipe, stages_to_run
from recipe_engine.store.store import Store, check_output_root, mark_engine_folder


@dataclass(frozen=True)
class FinishedRun:
    """A run that executed to its end on the process that reports it (rank 0)."""

    plan: RecipePlan
    results: list[StageResult]
    run_dir: Path


# A run's outcome: finished (to be reported), or the exit code of a run with nothing to report
# (a refusal or a failure, its one message printed; 0 on a rank other than 0).
Outcome = FinishedRun | int


@dataclass(frozen=True)
class SweepPlans:
    """Every job of a multirun planned up front, in the order Hydra's sweeper numbers them
    (`hydra.job.num`), each with the overrides the sweeper hands that job (its task overrides:
    Hydra's own are not the job's)."""

    jobs: list[list[str]]
    plans: list[RecipePlan]

    def handed(self) -> RecipePlan:
        """The plan of the job running now (in its Hydra job)."""
        from hydra.core.hydra_config import HydraConfig

        hydra_cfg = HydraConfig.get()
        num, overrides = int(hydra_cfg.job.num), list(hydra_cfg.overrides.task)
        if num >= len(self.plans) or self.jobs[num] != overrides:  # a sweeper of its own order
            raise RuntimeError(f"No plan was made for sweep job #{num} ({' '.join(overrides)}).")
        return self.plans[num]


def refuse_before_writing(plan: RecipePlan) -> None:
    """An unusable output root, and `only` without its parents stored: refused here, before
    any folder is made."""
    check_output_root(plan.config.output_root)
    stages_to_run(plan, Store(plan.config.output_root))


def use_planned_devices(plan: RecipePlan) -> None:
    """The devices the plan chose, set before anything initialises CUDA (or DeepSpeed picks
    its accelerator, which it does as it starts)."""
    visible = plan.cuda_visible_devices
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    if any(
        s.placement.mode == "deepspeed" and s.placement.device == "cpu"
        for s in plan.stages.values()
    ):
        os.environ["DS_ACCELERATOR"] = "cpu"


def without_hydra(composed: DictConfig) -> DictConfig:
    """The job's config: the composed one without Hydra's own section."""
    job = composed.copy()
    with open_dict(job):
        del job["hydra"]
    return job


class JobCallbacks:
    """The `hydra.callbacks` the config names, told of the run and its job as `hydra.main`
    tells them: instantiated with `hydra.utils.instantiate`; a callback that raises is a
    warning, and the end events go to them in reverse order."""

    def __init__(self, config: DictConfig) -> None:
        from hydra.utils import instantiate

        named = OmegaConf.select(config, "hydra.callbacks") or {}
        self.callbacks = [instantiate(params) for params in named.values()]

    def _notify(self, event: str, reverse: bool = False, **kwargs: Any) -> None:
        for callback in reversed(self.callbacks) if reverse else self.callbacks:
            try:
                getattr(callback, event)(**kwargs)
            except Exception as error:  # Hydra's own rule: a warning, the run goes on
                said = f"Callback {type(callback).__name__}.{event} raised"
                warnings.warn(f"{said} {type(error).__name__}: {error}", stacklevel=3)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._notify("on_run_start", config=config, **kwargs)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._notify("on_run_end", reverse=True, config=config, **kwargs)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._notify("on_job_start", config=config, **kwargs)

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._notify("on_job_end", reverse=True, config=config, **kwargs)


def run_composed(composed: DictConfig, plan: RecipePlan) -> Outcome:
    """One run, on the config composed once (with Hydra's section): Hydra's own job runner
    makes the run folder, its .hydra/ record and the callbacks as `hydra.main` would, then
    executes the plan handed to it. Returns the run's outcome, for the caller to report."""
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.types import HydraContext, RunMode

    with open_dict(composed.hydra):
        composed.hydra.mode = RunMode.RUN
    callbacks = JobCallbacks(composed)
    callbacks.on_run_start(config=composed, config_name=CONFIG_NAME)
    done = hydra_run_job(
        task_function=lambda cfg: _run_job(cfg, plan),
        config=composed,
        job_dir_key="hydra.run.dir",
        job_subdir_key=None,
        hydra_context=HydraContext(config_loader=None, callbacks=callbacks),  # type: ignore[arg-type]
    )
    callbacks.on_run_end(config=composed, config_name=CONFIG_NAME, job_return=done)
    return done.return_value  # type: ignore[no-any-return]  # a job that raised raises here


def _run_job(cfg: DictConfig, plan: RecipePlan) -> Outcome:
    run_dir = job_folder()
    try:
        with job_plan(cfg, plan) as planned:
            return execute(planned, run_dir)
    except Exception as error:
        return failure_code(error, run_dir)


def job_folder() -> Path:
    """The folder of the Hydra job running now, marked as the engine's (`runs rm` removes
    only folders that carry the mark)."""
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if is_main_process():
        mark_engine_folder(run_dir)
    return run_dir


@contextmanager
def job_plan(cfg: DictConfig, handed: RecipePlan | SweepPlans) -> Iterator[RecipePlan]:
    """The plan the Hydra job running now executes, for as long as the job lasts (its run and
    its report): the one handed to it (a sweep's: this job's); under a scheduler, made on the
    node it runs on; on a GPU a parallel sweep job leases from `gpus`, made for that GPU."""
    from hydra.core.hydra_config import HydraConfig

    launcher = HydraConfig.get().runtime.choices.get("hydra/launcher")
    if launcher is not None and is_scheduler(launcher):
        yield plan_on_this_node(cfg)
        return
    pool = job_pool(parse_gpus(cfg.gpus), cfg.parallel, launcher)
    if pool is None:
        yield handed if isinstance(handed, RecipePlan) else handed.handed()
        return
    with lease_gpu(pool, Path(cfg.output_root) / "locks") as gpu:
        cfg.gpus = [gpu]  # this job's GPU; CUDA has not started in this process yet
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
        yield plan_from_config(to_engine_config(cfg))


def plan_on_this_node(cfg: DictConfig) -> RecipePlan:
    """A scheduled job's plan, made where it runs: the plan made on the submitting machine saw
    that machine's devices, not the GPUs the scheduler gave this job (CUDA_VISIBLE_DEVICES).
    A hardware profile only sized the request (hydra.launcher.gpus_per_node), so the node is
    read as it is."""
    config = dataclasses.replace(to_engine_config(cfg), hardware=HardwareConfig())
    return plan_from_config(config)


def execute(plan: RecipePlan, run_dir: Path) -> Outcome:
    """The plan's stages run in `run_dir`: the finished run on rank 0; the other ranks' part
    ends here (0), their process group left, since rank 0 reports alone."""
    results = run_recipe(plan, run_dir)
    if not is_main_process():
        leave_process_group()
        return 0
    return FinishedRun(plan, results, run_dir)


def conclude(finished: FinishedRun, unreported: Sequence[str]) -> int:
    """A reported run's end: its process group left, then what it left undone (a stage's
    failed evaluation, what could not be reported), one line each; the exit code."""
    undone = incomplete(finished.results) + list(unreported)
    leave_process_group()
    if undone:
        lines = "\n".join(f"  {line}" for line in undone)
        print(f"error: the run is incomplete:\n{lines}", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


def failure_code(error: Exception, run_dir: Path) -> int:
    """A run that did not finish, as one message and its exit code: a refusal (2), a stage
    that failed (1), or what no check foresaw (1, its traceback in the run folder). Called in
    the `except` that caught `error`."""
    if isinstance(error, RecipeError):
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    if isinstance(error, StageFailed):  # on its own line: a progress bar may have the cursor
        print(f"\nerror: {error}", file=sys.stderr)
        return EXIT_INCOMPLETE
    # a library failed mid-run: one line here, its traceback kept
    print(f"\nerror: {_stopped(error, run_dir)}", file=sys.stderr)
    return EXIT_INCOMPLETE


def leave_process_group() -> None:
    """This process's collectives are over: its process group is destroyed while the
    interpreter is whole. Left to the interpreter's exit, gloo's worker threads can abort the
    process ("terminate called without an active exception", SIGABRT; pytorch/pytorch#190489):
    here a two-process ZeRO-3 run whose every stage committed exited -6 once in three full
    test runs, under load. Only after a run that finished: a failed rank may leave others
    inside a collective, where destroying the group would hang."""
    if "torch" not in sys.modules:  # a run that trained nothing: no group, and no torch import
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _stopped(error: Exception, run_dir: Path) -> str:
    """What stopped a run that no check foresaw, with its traceback written to the run folder
    (for the bug report the message asks for), never to the terminal."""
    import traceback

    where: Path | None = run_dir / "traceback.txt"
    try:
        where.write_text(traceback.format_exc())
    except OSError:  # the run folder itself cannot take it (a full disk): the message still
        where = None
    first = (str(error).strip().splitlines() or [""])[0][:300]
    kept = f"the traceback is in {where}" if where else "the traceback could not be written"
    return (
        f"the run stopped: {type(error).__name__}: {first}. What committed before it is kept "
        f"and a rerun resumes the rest; {kept} (please include it if you report this)."
    )
