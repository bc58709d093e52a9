"""One planned recipe run as a Hydra job: the run folder Hydra makes, the plan made for the
job's config run in it, and the exit code it ends with.

Every way a recipe is run goes through here: the `run` verb (one run, or each job of a
multirun through Hydra's launcher) and a recipe-vs-recipe experiment (`evaluate.experiment`,
each recipe and seed one run). So the checks before anything is written
(`refuse_before_writing`) and the devices the plan chose (`use_planned_devices`) are set up in
one place. What a finished run reports (its table, its compare) is measured and rendered
above this layer, so the caller hands it in as a `RunReport`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, open_dict

from recipe_engine.config.compose import CONFIG_NAME, to_engine_config
from recipe_engine.config.schema import EngineConfig, HardwareConfig
from recipe_engine.errors import EXIT_INCOMPLETE, EXIT_USER_ERROR, RecipeError, StageFailed
from recipe_engine.hashing import canonical_hash
from recipe_engine.plan.hardware import parse_gpus
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.run.gpu_pool import is_scheduler, job_pool, lease_gpu
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import StageResult, incomplete, run_recipe, stages_to_run
from recipe_engine.store.store import Store, check_output_root, mark_engine_folder

Plans = dict[str, RecipePlan]  # by the hash of the job's config (`config_key`)
# What a finished run reports (on rank 0): prints its table and compare, returns what it could
# not report, one line each (an empty list: all reported).
RunReport = Callable[[RecipePlan, list[StageResult], Path], list[str]]


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


def config_key(config: EngineConfig) -> str:
    return canonical_hash(dataclasses.asdict(config))


def without_hydra(composed: DictConfig) -> DictConfig:
    """The job's config: the composed one without Hydra's own section."""
    job = composed.copy()
    with open_dict(job):
        del job["hydra"]
    return job


def run_composed(composed: DictConfig, plan: RecipePlan, report: RunReport) -> int:
    """One run, on the config composed once (with Hydra's section): Hydra's own job runner
    makes the run folder, its .hydra/ record and the callbacks as `hydra.main` would, then
    runs the plan made from it. Returns the run's exit code."""
    from hydra._internal.callbacks import Callbacks  # what Hydra.run builds for a run
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.types import HydraContext, RunMode

    with open_dict(composed.hydra):
        composed.hydra.mode = RunMode.RUN
    plans = {config_key(plan.config): plan}
    callbacks = Callbacks(composed)
    callbacks.on_run_start(config=composed, config_name=CONFIG_NAME)
    done = hydra_run_job(
        task_function=lambda cfg: job_exit_code(cfg, plans, report),
        config=composed,
        job_dir_key="hydra.run.dir",
        job_subdir_key=None,
        hydra_context=HydraContext(config_loader=None, callbacks=callbacks),  # type: ignore[arg-type]
    )
    callbacks.on_run_end(config=composed, config_name=CONFIG_NAME, job_return=done)
    return int(done.return_value)  # a job that raised raises here, as hydra.main does


def job_exit_code(cfg: DictConfig, plans: Plans, report: RunReport) -> int:
    """One Hydra job: its plan (made up front, or here in a scheduled job), run and reported;
    a refusal or a failure is one message and the exit code says which."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if is_main_process():  # `runs rm` removes only folders that carry it
        mark_engine_folder(run_dir)
    launcher = hydra_cfg.runtime.choices.get("hydra/launcher")
    try:
        if launcher is not None and is_scheduler(launcher):
            return _run_and_report(_plan_on_this_node(cfg), run_dir, report)
        pool = job_pool(parse_gpus(cfg.gpus), cfg.parallel, launcher)
        if pool is None:
            return _run_and_report(_plan_of(cfg, plans), run_dir, report)
        with lease_gpu(pool, Path(cfg.output_root) / "locks") as gpu:
            cfg.gpus = [gpu]  # this job's GPU; CUDA has not started in this process yet
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
            return _run_and_report(_plan_of(cfg, plans), run_dir, report)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except StageFailed as error:  # on its own line: a progress bar may have the cursor
        print(f"\nerror: {error}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except Exception as error:  # a library failed mid-run: one line here, its traceback kept
        print(f"\nerror: {_stopped(error, run_dir)}", file=sys.stderr)
        return EXIT_INCOMPLETE


def _run_and_report(plan: RecipePlan, run_dir: Path, report: RunReport) -> int:
    results = run_recipe(plan, run_dir)
    if not is_main_process():
        leave_process_group()  # the other ranks' part is done: rank 0 reports alone
        return 0
    undone = incomplete(results) + report(plan, results, run_dir)
    leave_process_group()
    if undone:
        lines = "\n".join(f"  {line}" for line in undone)
        print(f"error: the run is incomplete:\n{lines}", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


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


def _plan_of(cfg: DictConfig, plans: Plans) -> RecipePlan:
    """The plan made for this job's config before anything ran (never made again here)."""
    key = config_key(to_engine_config(cfg))
    if key not in plans:  # a launcher that changed the config it was given
        raise RuntimeError(f"No plan was made for this job's config ({key[:12]}).")
    return plans[key]


def _plan_on_this_node(cfg: DictConfig) -> RecipePlan:
    """A scheduled job's plan, made where it runs: the plan made on the submitting machine saw
    that machine's devices, not the GPUs the scheduler gave this job (CUDA_VISIBLE_DEVICES).
    A hardware profile only sized the request (hydra.launcher.gpus_per_node), so the node is
    read as it is."""
    config = dataclasses.replace(to_engine_config(cfg), hardware=HardwareConfig())
    return plan_from_config(config)
