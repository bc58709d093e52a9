"""`run` (the default verb): plan every job, refuse before anything is written, then train.

One straight path, each step called once and in this order: compose the config (Hydra),
resolve and plan it (`run.planning`: a bad recipe writes nothing), execute the plan in the run
folder Hydra's job runner makes (`run.hydra_job`), then measure and report the finished run
(`evaluate.after_run`) and end it with its exit code. A multirun plans every combination
first; Hydra's launcher then composes and runs the jobs, each handed the plan made for it (by
its job number) and recomputing none of it, then measured and reported the same way.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from recipe_engine.cli.argv import (
    PRINT_FLAGS,
    config_dirs,
    expand_sweep,
    split_hydra_flags,
    task_overrides,
)
from recipe_engine.config.compose import CONFIG_NAME, CONFIG_SOURCE, compose_config
from recipe_engine.config.schema import register_configs
from recipe_engine.errors import EXIT_USER_ERROR, RecipeError
from recipe_engine.launchers.registry import check_sweep, launcher_kind
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.report.jobs import render_submitted
from recipe_engine.run.hydra_job import (
    Outcome,
    SweepPlans,
    execute,
    failure_code,
    job_folder,
    job_plan,
    refuse_before_writing,
    run_composed,
    use_planned_devices,
    without_hydra,
)
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.preflight import stop_judge
from recipe_engine.run.submission import submit_recipe
from recipe_engine.store.store import mark_engine_folder

USAGE = """\
usage: recipe-engine [run] [key=value ...] [-m] [--config-dir DIR] [--cfg job|all]

Train the recipe's stages in order (run is the default verb). Each stage is planned and
checked first, then reused from the store when an identical stage trained before, resumed
from its last complete checkpoint after a crash, or trained; the run ends with a table,
a loss plot and the base-vs-stages compare report in outputs/runs/<recipe>/<time>/.

options (Hydra override syntax):
  recipe=NAME model=NAME data=NAME   which recipe, base model and data
  gpus=6,7                           physical GPU ids (sets CUDA_VISIBLE_DEVICES first)
  device=auto|cpu|cuda|mps  parallel=auto|single|model_parallel|ddp|fsdp|deepspeed
  stage.NAME.train.KEY=V             any SFTConfig field (lora.*, quantization.* alike)
  only=[NAME] force=[NAME] fresh=true   run some stages / retrain / ignore checkpoints
  eval.enabled=false                 train without the held-out evaluation
  -m KEY=A,B                         a Hydra multirun sweep (identical stages train once)
  --cfg job|all [--resolve], --info  print the composed config or Hydra's info; run nothing

exit codes: 0 done, 1 a stage failed or an optional step (evaluation, compare) did not finish,
2 bad input (one message; nothing written).

examples:
  python -m recipe_engine recipe=r3-two-stage gpus=6,7
  python -m recipe_engine -m recipe=r1-llm-only stage.llm.train.learning_rate=1e-4,2e-4
"""


def main(args: list[str], multirun: bool) -> int:
    overrides, flags = split_hydra_flags(args)
    if any(flag in PRINT_FLAGS for flag in flags):  # Hydra prints the config or its info
        run_hydra_app([*overrides, *flags], None)  # flags last: `--info` takes no override
        return 0
    if multirun:
        return _sweep(overrides, flags, args)
    if int(os.environ.get("RANK", "0")) > 0:
        overrides = [*overrides, "hydra.output_subdir=null"]  # rank 0 writes the run config
    composed = compose_config(overrides, extra_dirs=config_dirs(flags), with_hydra=True)
    plan = plan_from_config(without_hydra(composed))
    refuse_before_writing(plan)
    stop_judge()  # every plan this command makes is made
    kind = launcher_kind(plan.config.launcher)
    if kind.scheduled and not kind.waits:
        return _submit(composed, plan, args)
    if not kind.scheduled:  # a scheduled stage's processes start on its nodes
        use_planned_devices(plan)
        if plan.starter_processes:
            return relaunch(args, plan)
    return report_finished(run_composed(composed, plan))


def report_finished(outcome: Outcome) -> int:
    """A finished run measured and reported (`evaluate.after_run`), then its exit code."""
    # Imported here: a cached rerun never loads the measuring (nor torch, when it measures).
    from recipe_engine.evaluate.after_run import finish_run

    return finish_run(outcome)


def _submit(composed: DictConfig, plan: RecipePlan, args: list[str]) -> int:
    """A launcher whose scheduler queues the jobs (SLURM): the plan's stage jobs submitted;
    returns at once (`runs jobs` follows them)."""
    run_dir = Path(str(composed.hydra.run.dir)).resolve()
    jobs = submit_recipe(plan, args, run_dir)
    if jobs:
        mark_engine_folder(run_dir)
    print(render_submitted(plan, jobs, run_dir))
    return 0


def _sweep(overrides: list[str], flags: list[str], args: list[str]) -> int:
    """Each job of a multirun planned up front (a bad one writes nothing); Hydra's launcher
    then composes and runs the jobs, each handed the plan made for it."""
    jobs = expand_sweep(overrides)
    check_scheduler(jobs[0], config_dirs(flags))
    plans = [_plan_job(job, overrides, config_dirs(flags)) for job in jobs]
    for plan in plans:
        refuse_before_writing(plan)
    stop_judge()
    run_hydra_app(args, SweepPlans([task_overrides(job) for job in jobs], plans))
    return 0


def _plan_job(job: list[str], overrides: list[str], extra_dirs: list[str]) -> RecipePlan:
    """One job's plan; a refusal of a key the sweep split at its commas says so, since the
    user may have meant one job with a list (`gpus=6,7` in -m is two jobs)."""
    try:
        return plan_from_config(compose_config(job, extra_dirs=extra_dirs))
    except RecipeError as error:
        swept = [o for o in overrides if "," in o and o.split("=", 1)[0].lstrip("+~") == error.key]
        if not swept:
            raise
        key, values = swept[0].lstrip("+~").split("=", 1)
        raise RecipeError(
            f"{error} (With -m, `{swept[0]}` is a sweep: one job per value, {key}="
            f"{values.split(',')[0]} in this one. For one job with all of them, write "
            f"{key}=[{values}].)",
            key=error.key,
        ) from None


def check_scheduler(overrides: list[str], extra_dirs: list[str]) -> None:
    """A sweep whose Hydra launcher submits to a scheduler is checked by its launcher before
    anything is written (`launchers.registry.check_sweep`)."""
    if not any(o.startswith("hydra/launcher=") for o in overrides):
        return
    check_sweep(compose_config(overrides, extra_dirs=extra_dirs, with_hydra=True).hydra.launcher)


def run_hydra_app(args: list[str], plans: SweepPlans | None) -> None:
    """Hydra's entry point with the engine's shipped configs, running each job's plan (a job
    that fails ends the process with its exit code, as `hydra.main` apps do); None: a command
    that only prints (`--cfg`, `--info`), whose app never runs."""
    register_configs()
    sys.argv = [sys.argv[0], *args]

    def task(cfg: DictConfig) -> None:
        assert plans is not None, "a command that runs jobs planned them"
        code = sweep_job(cfg, plans)
        if code:
            sys.exit(code)

    hydra.main(config_path=CONFIG_SOURCE, config_name=CONFIG_NAME, version_base="1.3")(task)()


def sweep_job(cfg: DictConfig, plans: SweepPlans) -> int:
    """One job of a multirun, in its Hydra job: its plan (handed to it by its job number, or
    made where its devices are known), executed, then measured and reported; its exit code."""
    run_dir = job_folder()
    try:
        with job_plan(cfg, plans) as plan:
            return report_finished(execute(plan, run_dir))
    except Exception as error:
        return failure_code(error, run_dir)


def relaunch(args: list[str], plan: RecipePlan) -> int:
    """Run this same command as processes of torch.distributed.run (torchrun).

    Every rank gets the same overrides and one shared run folder, so all ranks run the same
    stages; rank 0 writes manifests and the summary. For several machines, call torchrun
    yourself with --nnodes/--node_rank/--rdzv_endpoint and `-m recipe_engine ...`.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = f"{plan.config.output_root}/runs/{plan.recipe}/{stamp}"
    nproc = plan.starter_processes
    command = [
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "recipe_engine",
        *args,
        f"hydra.run.dir={run_dir}",
    ]
    print(f"launching {nproc} processes: torchrun {' '.join(command)}", file=sys.stderr)
    # torchrun's agent makes a log folder per launch (empty: no --redirects) and never removes
    # it; left to itself, that is one more /tmp/torchelastic_* for every distributed run.
    try:
        with tempfile.TemporaryDirectory(prefix="recipe-engine-torchrun-") as logs:
            torchrun([f"--log-dir={logs}", *command])
    except ChildFailedError as error:
        codes = {failure.exitcode for failure in error.failures.values()}
        return EXIT_USER_ERROR if codes == {EXIT_USER_ERROR} else 1
    return 0
