"""`launcher=slurm`: submit a plan's stage jobs through submitit, and what each job runs.

Each stage the store lacks is one SLURM job (`plan.jobs`, sized by `slurm_jobs`), a
child submitted with `--dependency=afterok:<parent's job>` and `--kill-on-invalid-dep=yes`, so
a parent that fails leaves its children cancelled. Submission returns at once; `jobs.json` in
the run folder records the jobs (`runs jobs` shows their states).

A job runs this same command on its node, for its one stage (`stage_command`): on one node as
a plain process, on several nodes as one torchrun per node (srun starts one task per node),
the rendezvous at the allocation's first node. The
store's per-stage lock makes a job whose stage another job is training wait, then reuse it.
A job that reaches its time limit is signalled first, requeues itself (submitit's
checkpointing) and resumes from the stage's last checkpoint; so does one cancelled and
submitted again with the same command.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import TRACKING_PARENT_VARIABLE, StageJob, Submission
from recipe_engine.launchers.records import SubmittedJob, save_jobs
from recipe_engine.launchers.slurm_jobs import master_port, rendezvous_port, signal_delay_s
from recipe_engine.launchers.stage_command import (
    Rendezvous,
    node_command,
    port_is_free,
    stage_args,
)


def submit_jobs(submission: Submission) -> list[SubmittedJob]:
    """Every job of the plan, in graph order, each after its parent's; recorded in the run
    folder before this returns."""
    run_dir, args, config = submission.run_dir, list(submission.args), submission.config
    try:
        import submitit
    except ImportError:
        raise RecipeError(
            "`launcher=slurm` submits with submitit: pip install 'recipe-engine[submitit]'.",
            key="launcher",
        ) from None
    created = _first_missing(run_dir)  # removed again if sbatch refuses: nothing written
    run_dir.mkdir(parents=True, exist_ok=True)
    submitted: dict[str, SubmittedJob] = {}
    command = " ".join(["python -m recipe_engine", *map(shlex.quote, args)])
    parent = submission.open_tracking_parent()
    for name, job in submission.jobs.items():
        executor = submitit.SlurmExecutor(folder=run_dir / name / "slurm", max_num_timeout=1000)
        executor.update_parameters(**_sbatch_options(submission, job, submitted))
        task = StageTask(
            args=tuple(args),
            stage=name,
            run_dir=str(run_dir),
            nodes=job.nodes,
            processes_per_node=job.processes_per_node,
            mlflow_parent=parent,
            master_port=master_port(config.slurm.master_port),
        )
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr
                slurm_job = executor.submit(task)
        except (
            submitit.core.utils.FailedJobError,
            submitit.core.utils.FailedSubmissionError,
        ) as error:
            _cancel([job.job_id for job in submitted.values()])
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            extra = config.slurm.additional_parameters
            raise sbatch_refusal(name, str(error), list(submitted), extra) from None
        submitted[name] = SubmittedJob(
            stage=name,
            job_id=str(slurm_job.job_id),
            key=submission.keys[name],
            after=job.after,
            nodes=job.nodes,
            log=str(slurm_job.paths.stdout).replace("%t", "0"),
            command=command,
        )
        save_jobs(run_dir, list(submitted.values()))
    return list(submitted.values())


# sbatch's refusals, by what it names, and the key that set it.
REFUSED_BY = (
    ("account", "slurm.account"),
    ("partition", "slurm.partition"),
    ("qos", "slurm.qos"),
    ("gres", "device"),
    ("constraint", "slurm.constraint"),
    ("time limit", "slurm.time"),
    ("memory", "slurm.mem_gb"),
    ("node configuration", "slurm.cpus_per_task"),
)


def sbatch_refusal(
    stage: str, error: str, cancelled: list[str], extra: Iterable[str]
) -> RecipeError:
    """sbatch's own words, one line, with the key whose value it refused (an option of
    `slurm.additional_parameters` first: it overrides the engine's)."""
    said = next((line.strip() for line in error.splitlines() if "error" in line.lower()), "")
    said = said or (error.strip().splitlines() or ["(no message)"])[-1]
    # `extra`: the names of slurm.additional_parameters' options
    words = [(name.replace("_", " "), f"slurm.additional_parameters.{name}") for name in extra]
    key = next((k for word, k in [*words, *REFUSED_BY] if word in said.lower()), "slurm")
    undone = (
        f" The job(s) of {', '.join(cancelled)} submitted before it were cancelled."
        if cancelled
        else ""
    )
    return RecipeError(
        f"sbatch refused stage `{stage}`'s job: {said[:300]} (set by `{key}`; `plan ... "
        f"launcher=slurm` shows each job's request).{undone}",
        key=key,
    )


def _first_missing(folder: Path) -> Path | None:
    """The outermost folder of `folder`'s path that does not exist yet (None: it exists)."""
    missing = None
    for path in [folder, *folder.parents]:
        if path.exists():
            return missing
        missing = path
    return missing


def _cancel(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, check=False, timeout=60)


def _sbatch_options(
    submission: Submission, job: StageJob, submitted: dict[str, SubmittedJob]
) -> LibraryKwargs:
    """submitit's `SlurmExecutor.update_parameters` arguments for the stage's job."""
    slurm = submission.config.slurm
    options: LibraryKwargs = {
        "job_name": f"{submission.recipe}-{job.stage}",
        "partition": job.pool.removeprefix("partition "),
        "nodes": job.nodes,
        # One task per node: it starts the stage's processes there (torchrun on several).
        "ntasks_per_node": 1,
        "cpus_per_task": job.cpus_per_node,
        "mem": f"{job.mem_gb}GB",
        "time": job.time_min,
        "signal_delay_s": signal_delay_s(submission.config),
        "setup": list(slurm.setup),
        "additional_parameters": {"kill_on_invalid_dep": "yes", **slurm.additional_parameters},
    }
    if job.gpus_per_node:  # a CPU cluster declares no gpu gres: asking for 0 is refused
        options["gpus_per_node"] = job.gpus_per_node
    for key in ("account", "qos", "constraint"):
        if getattr(slurm, key):
            options[key] = getattr(slurm, key)
    if job.after:
        ids = ":".join(submitted[parent].job_id for parent in job.after)
        options["dependency"] = f"afterok:{ids}"
    return options


@dataclass(frozen=True)
class StageTask:
    """What a stage's job runs on each of its nodes (submitit pickles it into the job)."""

    args: tuple[str, ...]
    stage: str
    run_dir: str
    nodes: int
    processes_per_node: int
    mlflow_parent: str | None = None  # the MLflow run the stage's run nests under
    master_port: int | None = None  # slurm.master_port, as planned

    def __call__(self) -> str:
        command = self._command()
        print(f"stage {self.stage}: {shlex.join(command)}", flush=True)
        code = subprocess.run(command, check=False, env=self.environment()).returncode
        if code != 0:
            raise RuntimeError(
                f"stage {self.stage} stopped with exit code {code} (its messages are above; "
                f"its run folder: {Path(self.run_dir) / self.stage})"
            )
        return self.stage

    def environment(self) -> dict[str, str]:
        """The job's environment, with the MLflow run its stage nests under."""
        if self.mlflow_parent is None:
            return dict(os.environ)
        return {**os.environ, TRACKING_PARENT_VARIABLE: self.mlflow_parent}

    def checkpoint(self) -> object:
        """On the time-limit signal: requeue the same task; the stage resumes from its last
        checkpoint in the store's work folder."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)

    def _command(self) -> list[str]:
        """The stage on this node of the allocation, the rendezvous at its first node."""
        arguments = stage_args(self.args, self.stage, self.run_dir)
        stage_dir = Path(self.run_dir) / self.stage
        if self.nodes == 1:
            return node_command(arguments, stage_dir, None)
        import submitit

        env = submitit.JobEnvironment()
        port = rendezvous_port(self.master_port, int(env.job_id))
        if env.node == 0:
            refuse_a_taken_port(port, self.stage)
        meeting = Rendezvous(
            nodes=self.nodes,
            node_rank=env.node,
            processes_per_node=self.processes_per_node,
            master_addr=node_address(env.hostnames[0]),
            master_port=port,
        )
        return node_command(arguments, stage_dir, meeting)


def refuse_a_taken_port(port: int, stage: str) -> None:
    """On the first node, before torchrun: a port another program holds would leave every
    node waiting for a rendezvous that never comes. The others cannot pick another number
    without talking to this node, so the job stops here, saying which key to set."""
    if not port_is_free(port):
        raise RuntimeError(
            f"stage {stage}: the rendezvous port {port} on the first node is taken (Address "
            "already in use); set slurm.master_port to a free port and run again"
        )


def node_address(node: str) -> str:
    """The address SLURM reaches a node at (its NodeAddr; the node's name on most clusters)."""
    shown = subprocess.run(
        ["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, check=False
    ).stdout
    for field in shown.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node
