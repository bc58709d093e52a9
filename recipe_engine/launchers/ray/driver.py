"""`launcher=ray`: this command drives the cluster. Every stage of the plan the store lacks
runs as one Ray task per node of the stage (the engine's own command on that node,
`node.run_stage`), a child started once its parents committed, siblings at once where the
cluster has room; the command waits for them all.

A stage's tasks hold one placement group of one bundle per node (the CPUs, GPUs and memory the
plan sized), spread over distinct nodes; a multi-node stage meets at its first bundle's node,
never at the driver's or the head's. A group the cluster cannot give within
`ray.placement_timeout_s` fails the stage instead of waiting forever.

Faults:
- a task whose node (or Ray worker) is lost: the stage runs again in a new group, up to
  `ray.max_retries` times, resuming from its last checkpoint in the shared store;
- a stage that fails (its process exits non-zero, or exits 0 without committing its key): its
  descendants never start, and the run says which stage failed and why;
- Ctrl-C or SIGTERM (`ray job stop`): every task is cancelled, its processes stopped; the
  store's commit is atomic, so nothing half-written is left, and the same command resumes;
- a stage another run is training (its key's lock or a driver's claim on it is held): it
  waits here, not on a node, and reuses what that run commits.

The jobs are recorded in the run folder as they change (`jobs.json`, and their states in
`ray-states.json`), so `runs jobs` and the web view read them while the run goes on and after.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from recipe_engine.errors import RecipeError, StageFailed
from recipe_engine.files import atomic_write_json
from recipe_engine.launchers.kinds import (
    TRACKING_PARENT_VARIABLE,
    JobPhase,
    JobState,
    StageJob,
    Submission,
)
from recipe_engine.launchers.ray import node
from recipe_engine.launchers.ray.cluster import connect, require_ray
from recipe_engine.launchers.ray.sizing import threads_per_process
from recipe_engine.launchers.records import SubmittedJob, save_jobs
from recipe_engine.launchers.stage_command import Rendezvous, stage_args

STATES_FILE = "ray-states.json"
POLL_S = 2.0  # how often the driver looks at what it waits for without a task
CANCEL_WAIT_S = 40.0  # a cancelled task's processes get node.STOP_GRACE_S to stop, then more
# What a lost node or Ray worker raises for its tasks: the stage runs again elsewhere.
LOST = (
    "NodeDiedError",
    "WorkerCrashedError",
    "LocalRayletDiedError",
    "ObjectLostError",
    "OwnerDiedError",
    "TaskPlacementGroupRemoved",
)


@dataclass(frozen=True)
class Said:
    """What the driver records of a stage: its phase, the word the web view and `status`
    show (RUNNING, NOT_RUN, NODE_LOST ...), why, and where it ended its exit code and nodes."""

    phase: JobPhase
    word: str
    reason: str = ""
    exit_code: str = "-"
    nodes: str = "-"


@dataclass
class Attempt:
    """One try of a stage: its placement group, then (once the group is placed, and its
    first node answered where to meet) one task per node."""

    number: int
    group: Any  # ray.util.placement_group.PlacementGroup
    placed: Any  # the group's ready() reference
    deadline: float
    started: float
    meeting: Any = None  # the first node's (address, port) reference, several nodes only
    tasks: dict[Any, int] = field(default_factory=dict)  # task reference -> node rank
    ended: dict[int, node.NodeRun] = field(default_factory=dict)

    def references(self) -> list[Any]:
        if self.meeting is not None:
            return [self.meeting]
        if not self.tasks:
            return [self.placed]
        return [ref for ref, rank in self.tasks.items() if rank not in self.ended]


class Driver:
    """The plan's pending stages on the cluster, driven from this process until each ended."""

    def __init__(self, submission: Submission) -> None:
        self.ray = require_ray()
        self.submission = submission
        config = submission.config
        self.settings = config.ray
        self.root = str(Path(config.output_root).resolve())
        self.cwd = None if "working_dir" in config.ray.runtime_env else os.getcwd()
        command = " ".join(["python -m recipe_engine", *map(shlex.quote, submission.args)])
        self.jobs: dict[str, SubmittedJob] = {
            name: SubmittedJob(
                stage=name,
                job_id=f"{name}-1",
                key=submission.keys[name],
                after=job.after,
                nodes=job.nodes,
                log=str(self._log(name, 0)),
                command=command,
                launcher="ray",
            )
            for name, job in submission.jobs.items()
        }
        self.states: dict[str, JobState] = {}
        self.waiting = dict(submission.jobs)
        self.running: dict[str, Attempt] = {}
        self.env: dict[str, str] = {}

    # ------------------------------------------------------------------ the run

    def drive(self) -> list[SubmittedJob]:
        """Every pending stage run to its end (committed, failed, or not run); recorded."""
        connect(self.submission.config)
        self.submission.run_dir.mkdir(parents=True, exist_ok=True)
        parent = self.submission.open_tracking_parent()
        if parent is not None:
            self.env[TRACKING_PARENT_VARIABLE] = parent
        for name in self.waiting:
            self._record(name, Said(JobPhase.PENDING, "WAITING", "for its parents"))
        try:
            with _signals_stop_the_run():
                while self.waiting or self.running:
                    self._start_what_can_start()
                    self._wait_a_moment()
        except KeyboardInterrupt:
            stopped = self._cancel_everything()
            raise StageFailed(
                f"the run was stopped (Ctrl-C or SIGTERM): stage(s) {', '.join(stopped)} "
                "cancelled on the cluster. Nothing half-written is in the store; the same "
                "command resumes them from their last checkpoints."
            ) from None
        return list(self.jobs.values())

    def _start_what_can_start(self) -> None:
        for name, job in list(self.waiting.items()):
            phases = {parent: self.states[parent].phase for parent in job.after}
            failed = [p for p, ph in phases.items() if ph.ended and ph is not JobPhase.COMPLETED]
            if failed:
                del self.waiting[name]
                why = f"its parent stage {failed[0]} did not commit"
                self._record(name, Said(JobPhase.CANCELLED, "NOT_RUN", why))
                continue
            if any(phase is not JobPhase.COMPLETED for phase in phases.values()):
                continue
            key = self.submission.keys[name]
            if self.submission.stored(key):
                del self.waiting[name]
                self._record(name, Said(JobPhase.COMPLETED, "COMPLETED", "in the store"))
                print(f"stage {name}: in the store (committed by another run)", flush=True)
                continue
            if not self.submission.claims.claim(key):
                why = "another run is training its key"
                self._record(name, Said(JobPhase.PENDING, "WAITING", why))
                continue
            del self.waiting[name]
            self._place(name, job, number=1)

    def _wait_a_moment(self) -> None:
        references = {ref: name for name, a in self.running.items() for ref in a.references()}
        if not references:
            if self.waiting:
                time.sleep(POLL_S)
            return
        ready, _ = self.ray.wait(list(references), num_returns=1, timeout=POLL_S)
        for ref in ready:
            name = references[ref]
            if name in self.running:
                self._settle(name, self.running[name], ref)
        for name, attempt in list(self.running.items()):
            if not attempt.tasks and attempt.meeting is None and time.time() > attempt.deadline:
                self._end(name, Said(JobPhase.FAILED, "UNSCHEDULABLE", self._no_room(name), "1"))

    # ------------------------------------------------------------------ one stage

    def _place(self, name: str, job: StageJob, number: int) -> None:
        """A placement group for the stage's nodes; its tasks start once it is placed."""
        from ray.util.placement_group import placement_group

        bundle: dict[str, float] = {"CPU": job.cpus_per_node, "memory": _bytes(job.mem_gb)}
        if job.gpus_per_node:
            bundle["GPU"] = job.gpus_per_node
        group = placement_group(
            [dict(bundle) for _ in range(job.nodes)],
            strategy="STRICT_SPREAD" if job.nodes > 1 else "PACK",
            name=f"{self.submission.recipe}-{name}-{number}",
        )
        now = time.time()
        deadline = now + self.settings.placement_timeout_s
        self.running[name] = Attempt(number, group, group.ready(), deadline, now)
        self.jobs[name] = self._replace_job(
            name, job_id=f"{name}-{number}", log=str(self._log(name, 0))
        )
        self._record(name, Said(JobPhase.PENDING, "PENDING", "waiting for room on the cluster"))

    def _settle(self, name: str, attempt: Attempt, ref: Any) -> None:
        """One reference of the stage's attempt is ready: its group placed, its first node's
        meeting point known, or one node's task ended."""
        try:
            value = self.ray.get(ref)
        except Exception as error:  # noqa: BLE001 (Ray's errors, sorted by what they mean)
            self._fault(name, attempt, error)
            return
        if ref == attempt.placed:
            if self.submission.jobs[name].nodes > 1:
                attempt.meeting = (
                    self._remote(node.rendezvous_point, num_cpus=0)
                    .options(scheduling_strategy=self._bundle(attempt, 0))
                    .remote()
                )
            else:
                self._start_tasks(name, attempt, None)
        elif ref == attempt.meeting:
            attempt.meeting = None
            self._start_tasks(name, attempt, value)
        else:
            attempt.ended[attempt.tasks[ref]] = value
            self._node_ended(name, attempt, value)

    def _start_tasks(self, name: str, attempt: Attempt, meeting: tuple[str, int] | None) -> None:
        job = self.submission.jobs[name]
        arguments = stage_args(
            self.submission.args,
            name,
            self.submission.run_dir,
            extra=[f"output_root={self.root}", "eval.compare=false"],
        )
        stage_dir = str(self.submission.run_dir / name)
        run = self._remote(node.run_stage, num_cpus=job.cpus_per_node)
        env = {**self.env, "OMP_NUM_THREADS": str(threads_per_process(job))}
        for rank in range(job.nodes):
            rendezvous = None
            if meeting is not None:
                address, port = meeting
                rendezvous = Rendezvous(job.nodes, rank, job.processes_per_node, address, port)
            options: dict[str, Any] = {
                "num_gpus": job.gpus_per_node,
                "memory": _bytes(job.mem_gb),
                "scheduling_strategy": self._bundle(attempt, rank),
                "name": f"{self.submission.recipe}:{name}[node {rank}]",
            }
            task = node.StageTask(tuple(arguments), stage_dir, self.cwd, env,
                                  str(self._log(name, rank)))  # fmt: skip
            ref = run.options(**options).remote(task, rendezvous)
            attempt.tasks[ref] = rank
        where = f" on {job.nodes} nodes" if job.nodes > 1 else ""
        tries = f" (try {attempt.number})" if attempt.number > 1 else ""
        print(f"stage {name}: running on the Ray cluster{where}{tries}", flush=True)
        self._record(name, Said(JobPhase.RUNNING, "RUNNING"))

    def _node_ended(self, name: str, attempt: Attempt, run: node.NodeRun) -> None:
        job = self.submission.jobs[name]
        if run.exit_code != 0:
            why = f"on {run.node}: {run.said}" if run.said else f"on {run.node}"
            self._end(name, Said(JobPhase.FAILED, "FAILED", why, str(run.exit_code)), attempt)
            return
        if len(attempt.ended) < job.nodes:
            return
        if not self.submission.stored(self.submission.keys[name]):
            why = (
                "it ended without committing its key: the node planned another stage "
                "(another engine, or other files there)"
            )
            self._end(name, Said(JobPhase.FAILED, "FAILED", why, "0"), attempt)
            return
        nodes = ", ".join(sorted({r.node for r in attempt.ended.values()}))
        self._end(name, Said(JobPhase.COMPLETED, "COMPLETED", "", "0", nodes), attempt)

    def _fault(self, name: str, attempt: Attempt, error: Exception) -> None:
        """A Ray error for one of the attempt's references: a lost node runs the stage again
        (while tries are left); anything else fails it."""
        kind = type(error).__name__
        lost = kind in LOST or any(c.__name__ in LOST for c in type(error).__mro__)
        first = (str(error).strip().splitlines() or [kind])[0][:300]
        if not lost:
            self._end(name, Said(JobPhase.FAILED, kind, first), attempt)
            return
        if attempt.number > self.settings.max_retries:
            why = f"its node was lost {attempt.number} time(s) ({first})"
            self._end(name, Said(JobPhase.NODE_LOST, "NODE_LOST", why), attempt)
            return
        print(
            f"stage {name}: its node was lost ({kind}); running it again from its last checkpoint",
            flush=True,
        )
        self._stop(attempt)
        del self.running[name]
        self._place(name, self.submission.jobs[name], attempt.number + 1)

    def _end(self, name: str, said: Said, attempt: Attempt | None = None) -> None:
        attempt = attempt or self.running.get(name)
        if attempt is not None:
            self._stop(attempt)
        self.running.pop(name, None)
        self.submission.claims.release(self.submission.keys[name])
        elapsed = _clock(time.time() - attempt.started) if attempt else "-"
        self._record(name, said, elapsed)
        if said.phase is JobPhase.COMPLETED:
            print(f"stage {name}: committed on the Ray cluster", flush=True)
        else:
            log = self.jobs[name].log
            print(f"stage {name}: {said.word} ({said.reason}); its log: {log}", flush=True)

    def _stop(self, attempt: Attempt) -> None:
        """The attempt's tasks still running are cancelled and its group removed."""
        from ray.util.placement_group import remove_placement_group

        for ref, rank in attempt.tasks.items():
            if rank not in attempt.ended:
                self.ray.cancel(ref, force=False)
        with contextlib.suppress(Exception):  # a group whose node is gone may be gone too
            remove_placement_group(attempt.group)

    def _cancel_everything(self) -> list[str]:
        """Ctrl-C / SIGTERM: every running task asked to stop (its processes get SIGTERM,
        then SIGKILL), awaited, forced if it does not; every stage not committed recorded."""
        stopped = list(self.running) + list(self.waiting)
        by_user = Said(JobPhase.CANCELLED, "CANCELLED", "stopped by the user")
        for name in stopped:  # first: `ray job stop` SIGKILLs the driver 3 s after its SIGTERM
            self._record(name, by_user)
        tasks = [ref for attempt in self.running.values() for ref in attempt.tasks]
        for ref in tasks:
            self.ray.cancel(ref, force=False)
        with contextlib.suppress(Exception):
            self.ray.wait(tasks, num_returns=len(tasks), timeout=CANCEL_WAIT_S)
        for ref in tasks:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        for name, attempt in list(self.running.items()):
            self._end(name, by_user, attempt)
        self.waiting.clear()
        return stopped

    # ------------------------------------------------------------------ helpers

    def _remote(self, function: Any, num_cpus: int) -> Any:
        return self.ray.remote(num_cpus=num_cpus, max_retries=0)(function)

    def _bundle(self, attempt: Attempt, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=attempt.group, placement_group_bundle_index=index
        )

    def _no_room(self, name: str) -> str:
        job = self.submission.jobs[name]
        return (
            f"the cluster gave no room for its {job.nodes} node(s) of {job.cpus_per_node} "
            f"CPU(s), {job.gpus_per_node} GPU(s), {job.mem_gb} GB within "
            f"ray.placement_timeout_s={self.settings.placement_timeout_s}"
        )

    def _log(self, name: str, rank: int) -> Path:
        return self.submission.run_dir / name / "ray" / f"node-{rank}.log"

    def _replace_job(self, name: str, **changes: str) -> SubmittedJob:
        return SubmittedJob(**{**asdict(self.jobs[name]), **changes})

    def _record(self, name: str, said: Said, elapsed: str = "-") -> None:
        job = self.jobs[name]
        self.states[name] = JobState(job.job_id, said.phase, said.word, said.exit_code,
                                     said.nodes, (), elapsed, said.reason)  # fmt: skip
        run_dir = self.submission.run_dir
        save_jobs(run_dir, list(self.jobs.values()))
        save_states(run_dir, self.states.values())


def save_states(run_dir: Path, states: Iterable[JobState]) -> None:
    """The jobs' states as the driver knows them, beside `jobs.json`."""
    atomic_write_json(run_dir / STATES_FILE, {state.job_id: _state_json(state) for state in states})


def read_states(run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
    """What the driver recorded of each job (an empty answer: it recorded nothing yet)."""
    path = run_dir / STATES_FILE
    if not path.is_file():
        return {}
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise RecipeError(f"{path} cannot be read: {error}.") from None
    ids = {job.job_id for job in jobs}
    return {
        job_id: JobState(
            job_id=job_id,
            phase=JobPhase(row["phase"]),
            said=row["said"],
            exit_code=row["exit_code"],
            nodes=row["nodes"],
            node_names=(),
            elapsed=row["elapsed"],
            reason=row["reason"],
        )
        for job_id, row in rows.items()
        if job_id in ids
    }


def _state_json(state: JobState) -> dict[str, str]:
    row = asdict(state)
    row["phase"] = state.phase.value
    del row["job_id"], row["node_names"]
    return row


def _bytes(gb: float) -> float:
    return gb * 1e9


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


@contextlib.contextmanager
def _signals_stop_the_run() -> Iterator[None]:
    """SIGTERM (`ray job stop`, a scheduler's stop) ends the wait as Ctrl-C does."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
