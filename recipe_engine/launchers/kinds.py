"""The launcher protocol (`LauncherKind`): its name; whether a scheduler sizes and starts each
stage's job; the checks of its own keys; its scheduler's partition, read; the jobs it sizes
from what each stage needs of a node (pure: the partition comes in as data); a multirun's Hydra
launcher it schedules and checks; the submission of a plan's pending stages, in order, a child
after its parent (what only `run` knows handed in: `Submission`); and its jobs' states. The
data launchers share: `Partition`, `StageNeeds`, `StageJob`, `JobState`, `Submission`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.records import SubmittedJob

# Where a submitted stage's job finds the MLflow run its own run nests under (the submission
# opened it; `run.mlflow_tracking` reads it).
TRACKING_PARENT_VARIABLE = "RECIPE_ENGINE_MLFLOW_PARENT_RUN"


@dataclass(frozen=True)
class Partition:
    """The nodes a scheduler gives jobs: how many, and what its smallest node offers; the
    launcher whose scheduler it is sizes the jobs for it."""

    name: str
    nodes: int
    cpus_per_node: int  # the smallest node's
    memory_mb: int  # the smallest node's
    gpus_per_node: int  # the smallest node's GPUs (gres gpu[:type]:N), 0 without
    max_time_min: int | None  # None: no limit
    scheduler: str = "slurm"  # the launcher that read it (the one with a scheduler so far)


# A multi-node stage's rendezvous port without slurm.master_port: 20000 + job id mod 20000,
# one per job id, so jobs sharing a node differ.
PORT_BASE, PORT_SPAN = 20000, 20000


def rendezvous_port(master_port: int | None, job_id: int) -> int:
    """The port a multi-node job's first node listens on for the others: every node reaches
    the same number alone, from `slurm.master_port` or SLURM's job id."""
    return master_port or PORT_BASE + job_id % PORT_SPAN


@dataclass(frozen=True)
class StageJob:
    """One stage's SLURM job, as `plan` prints it and `run` submits it."""

    stage: str
    nodes: int
    tasks_per_node: int  # one: the task starts the stage's processes (torchrun on each node)
    processes_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    mem_gb: int
    time_min: int
    signal_delay_s: int  # SLURM signals the job this long before its time limit (requeue)
    partition: str
    after: tuple[str, ...]  # stages whose jobs must end well first (afterok)
    master_port: int | None = None  # several nodes: slurm.master_port (None: from the job id)

    def describe(self) -> str:
        gpus = f", {self.gpus_per_node} GPU(s) per node" if self.gpus_per_node else ""
        after = f", after {', '.join(self.after)}" if self.after else ""
        return (
            f"job: {self.nodes} node(s), {self.processes_per_node} process(es) per node{gpus}, "
            f"{self.cpus_per_task} CPU(s), {self.mem_gb} GB, {self.time_min} min on partition "
            f"{self.partition}{after}{self._rendezvous()}"
        )

    def _rendezvous(self) -> str:
        if self.nodes == 1:
            return ""
        port = self.master_port or f"{PORT_BASE} + job id mod {PORT_SPAN}"
        return f"; rendezvous on the first node's port {port}"


@dataclass(frozen=True)
class JobState:
    """A job as its scheduler reports it (SLURM: `sacct`)."""

    job_id: str
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, RUNNING, PENDING, ...
    exit_code: str
    nodes: str  # the scheduler's node list (n[1-2])
    node_names: tuple[str, ...]
    elapsed: str
    reason: str


@dataclass(frozen=True)
class Submission:
    """A plan's pending stages as a launcher submits them: their jobs in graph order (each
    after its parents'), each stage's key, the command that runs them, and the MLflow run the
    stages' runs nest under, opened when the launcher asks (None: no stage reports to MLflow)."""

    recipe: str
    config: EngineConfig
    jobs: dict[str, StageJob]
    keys: dict[str, str]
    args: tuple[str, ...]
    run_dir: Path
    open_tracking_parent: Callable[[], str | None]


@dataclass(frozen=True)
class StageNeeds:
    """What one stage asks of each node it runs on, from its placement (decided by `plan`)."""

    stage: str
    processes_per_node: int
    on_gpu: bool  # one GPU per process
    host_gib: float  # host memory per node
    after: tuple[str, ...]  # stages whose jobs must end well first


class LauncherKind(Protocol):
    """A launcher as `plan` sees it."""

    name: str
    scheduled: bool  # a scheduler sizes and starts each stage's job (and may give it nodes)

    def check(self, cfg: EngineConfig) -> None:
        """What its own keys get wrong alone, before anything is read."""

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        """What its scheduler offers (read, not decided); None without a scheduler."""

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        """Each stage's job on `partition`, in order."""

    def schedules(self, hydra_launcher: str) -> bool:
        """Whether a multirun's Hydra launcher (`hydra/launcher=NAME`) hands its jobs to this
        launcher's scheduler, which gives each job its GPUs."""

    def check_sweep(self, hydra_launcher: Mapping[str, Any]) -> None:
        """A multirun's Hydra launcher config (`hydra.launcher`) checked against this
        launcher's scheduler before anything is written (nothing to check: not its own)."""

    def submit(self, submission: Submission) -> list[SubmittedJob]:
        """Every pending stage as a job of its scheduler, a child after its parent, recorded
        in the run folder (`records`); returns at once. A job resumes from its stage's last
        checkpoint when its scheduler requeues it, and submitting the same command again
        submits what is left (stored stages are reused)."""

    def job_states(self, job_ids: list[str]) -> dict[str, JobState]:
        """Its submitted jobs' states, by job id (asked of its scheduler)."""

    def down_nodes(self) -> dict[str, str]:
        """Nodes its scheduler holds down, drained or failing, with the reason given."""
