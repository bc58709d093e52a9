"""The launcher protocol (`LauncherKind`): its name; whether a scheduler sizes and starts each
stage's job; the checks of its own keys; its scheduler's nodes, read; the jobs it sizes from
what each stage needs of a node (pure: the nodes come in as data); what starts a stage's
processes on several nodes; a multirun's Hydra launcher it schedules and checks; the
submission of a plan's pending stages, a child after its parent (what only `run` knows handed
in: `Submission`); and its jobs' states.

The data launchers share describe any scheduler: `Partition` (the nodes jobs go to: a SLURM
partition, a Ray cluster), `StageNeeds`, `StageJob`, `JobState` (with the scheduler's own word
for it beside the `JobPhase` every launcher maps it to), `DownNode`, `Submission`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from recipe_engine.capabilities import StageCode
from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.records import SubmittedJob

# Where a submitted stage's job finds the MLflow run its own run nests under (the submission
# opened it; `run.mlflow_tracking` reads it).
TRACKING_PARENT_VARIABLE = "RECIPE_ENGINE_MLFLOW_PARENT_RUN"


@dataclass(frozen=True)
class NodeOffer:
    """What one node of a scheduler gives a job."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int

    def describe(self) -> str:
        gpus = f", {self.gpus} GPU(s)" if self.gpus else ""
        return f"{self.name} ({self.cpus} CPU(s), {self.memory_mb / 1000:g} GB{gpus})"


@dataclass(frozen=True)
class Partition:
    """The nodes a scheduler gives jobs (a SLURM partition, a Ray cluster's nodes), read before
    planning; the launcher whose scheduler it is (`scheduler`) sizes the jobs for it."""

    name: str  # the partition's name, or the cluster's address
    scheduler: str  # the launcher that read it
    nodes: tuple[NodeOffer, ...]
    max_time_min: int | None = None  # None: no limit

    def smallest(self) -> NodeOffer:
        """Each resource at its smallest across the nodes: what every node gives."""
        return NodeOffer(
            "every node",
            min((n.cpus for n in self.nodes), default=0),
            min((n.memory_mb for n in self.nodes), default=0),
            min((n.gpus for n in self.nodes), default=0),
        )

    def largest(self) -> NodeOffer | None:
        """The node with the most GPUs, then CPUs, then memory (None: no node)."""
        return max(self.nodes, key=lambda n: (n.gpus, n.cpus, n.memory_mb), default=None)


@dataclass(frozen=True)
class StageJob:
    """One stage's job as `plan` prints it and `run` submits it: what it holds on each of its
    nodes, where it goes and what it waits for."""

    stage: str
    nodes: int
    processes_per_node: int
    gpus_per_node: int
    cpus_per_node: int
    mem_gb: int
    time_min: int | None  # None: no limit
    pool: str  # "partition debug", "Ray cluster 10.0.0.1:6379"
    after: tuple[str, ...]  # stages whose jobs must end well first
    detail: str = ""  # what the launcher adds ("; rendezvous on the first node's port 29500")

    def describe(self) -> str:
        gpus = f", {self.gpus_per_node} GPU(s) per node" if self.gpus_per_node else ""
        after = f", after {', '.join(self.after)}" if self.after else ""
        time = f", {self.time_min} min" if self.time_min is not None else ""
        return (
            f"job: {self.nodes} node(s), {self.processes_per_node} process(es) per node{gpus}, "
            f"{self.cpus_per_node} CPU(s), {self.mem_gb} GB{time} on {self.pool}{after}"
            f"{self.detail}"
        )


class JobPhase(str, Enum):
    """Where a job is, in words every launcher maps its scheduler's states to."""

    PENDING = "pending"
    RUNNING = "running"
    REQUEUED = "requeued"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"  # by a user, or because a stage it waits for failed
    TIMEOUT = "timeout"
    NODE_LOST = "node lost"

    @property
    def ended(self) -> bool:
        return self not in (JobPhase.PENDING, JobPhase.RUNNING, JobPhase.REQUEUED)


@dataclass(frozen=True)
class JobState:
    """A job as its scheduler reports it: the phase, and the scheduler's own word for it."""

    job_id: str
    phase: JobPhase
    said: str  # the scheduler's state ("NODE_FAIL", "OUT_OF_MEMORY"), shown as it is
    exit_code: str
    nodes: str  # the scheduler's node list (n[1-2])
    node_names: tuple[str, ...]
    elapsed: str
    reason: str  # why it is pending or ended, in the scheduler's words ("" : none)


@dataclass(frozen=True)
class DownNode:
    """A node the scheduler holds down, why, and what brings it back."""

    reason: str
    back: str  # the command that returns it to service


class Claims(Protocol):
    """A run's claims on the stages it sends to a cluster (the store keeps them): claimed
    while a stage's task runs, so another run needing the same key waits for it, off the
    cluster, and reuses what it commits."""

    def claim(self, key: str) -> bool:
        """Claimed now; False while another run trains the key (or has it on a cluster)."""

    def release(self, key: str) -> None:
        """The key's stage ended here (committed or not)."""


@dataclass(frozen=True)
class Submission:
    """A plan's pending stages as a launcher submits them: their jobs in graph order (each
    after its parents'), each stage's key, the command that runs them, and what only the
    store knows, asked when the launcher needs it: whether a key is stored, the run's claims
    on the keys it runs, and the MLflow run the stages' runs nest under, opened when the
    launcher asks (None: no stage reports to MLflow)."""

    recipe: str
    config: EngineConfig
    jobs: dict[str, StageJob]
    keys: dict[str, str]
    args: tuple[str, ...]
    run_dir: Path
    open_tracking_parent: Callable[[], str | None]
    stored: Callable[[str], bool]
    claims: Claims


# CPUs a GPU process gets unless a launcher's key says otherwise (its data loading, its
# tokenising); a CPU process gets one.
CPUS_PER_GPU = 8


def default_cpus(gpus: int, processes: int) -> int:
    """CPUs a stage's job asks for on each node, unless its launcher's key sets them."""
    return CPUS_PER_GPU * gpus if gpus else processes


@dataclass(frozen=True)
class StageNeeds:
    """What one stage asks of each node it runs on, from its placement (decided by `plan`)."""

    stage: str
    processes_per_node: int
    on_gpu: bool  # one GPU per process
    host_gib: float  # host memory per node
    after: tuple[str, ...]  # stages whose jobs must end well first


class LauncherKind(Protocol):
    """A launcher as `plan` and `run` see it."""

    name: str
    scheduled: bool  # a scheduler sizes and starts each stage's job (and may give it nodes)
    # The command waits for its stages (a driver of the cluster's, as with Ray), so the run is
    # finished, summarised and reported here; otherwise submitting returns at once (SLURM)
    # and the jobs are followed with `runs jobs`.
    waits: bool
    # What starts a stage's processes on each of several nodes, as `plan` says it.
    node_starter: str
    # Its keys whose values run commands or ship code on its nodes (key, why): refused where
    # only code from one folder may run (the web view's overrides).
    command_keys: tuple[tuple[str, str], ...]

    def check(self, cfg: EngineConfig) -> None:
        """What its own keys get wrong alone, before anything is read."""

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        """What its scheduler offers (read, not decided); None without a scheduler."""

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        """Each stage's job on `partition`, in order; a job no node can hold is refused."""

    def schedules(self, hydra_launcher: str) -> bool:
        """Whether a multirun's Hydra launcher (`hydra/launcher=NAME`) hands its jobs to this
        launcher's scheduler, which gives each job its GPUs."""

    def check_sweep(self, hydra_launcher: Mapping[str, Any]) -> None:
        """A multirun's Hydra launcher config (`hydra.launcher`) checked against this
        launcher's scheduler before anything is written (nothing to check: not its own)."""

    def submit(self, submission: Submission) -> list[SubmittedJob]:
        """Every pending stage as a job of its scheduler, a child after its parent, recorded
        in the run folder (`records`). A launcher that `waits` returns when every job ended
        (their states in the records); the others return at once. A job resumes from its
        stage's last checkpoint when it runs again, and submitting the same command again
        submits what is left (stored stages are reused)."""

    def check_nodes(self, cfg: EngineConfig, code: Sequence[StageCode]) -> None:
        """Its nodes can run what the stages run (the engine, the user's code by content),
        refused before anything is submitted; nothing to check where it cannot ask them."""

    def job_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        """A run's submitted jobs' states, by job id (asked of its scheduler, or read from
        what its driver recorded)."""

    def recorded_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        """What it recorded of its jobs' states in the run folder, asking nobody (the web
        view reads it); empty where only its scheduler knows them."""

    def down_nodes(self) -> dict[str, DownNode]:
        """Nodes its scheduler holds down, drained or failing."""
