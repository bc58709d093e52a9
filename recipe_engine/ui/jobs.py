"""The engine's commands the view started: each is `python -m recipe_engine ...` as a process
of its own (its own session, so that Stop reaches its children: torchrun's workers, a compare's
runs), writing where the same command typed in a terminal would write. The server imports no
torch; it starts, watches and stops processes.

A job's record (`job.json`: the command, when, the process, how it ended) and its output
(`output.log`) are kept under `<output_root>/workbench/jobs/<id>/`, so the view can show them
after a restart. Stop is Ctrl-C: SIGINT to the job's process group, as a terminal sends it
(the engine commits nothing half-written; a rerun resumes from the stage's last checkpoint);
SIGTERM follows if it has not ended after STOP_GRACE_S, SIGKILL after twice that.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from recipe_engine.files import atomic_write_text
from recipe_engine.ui.paths import RUN_AREAS, Refused

WORKBENCH = "workbench"  # the view's own folder under output_root
JOB_FILE = "job.json"
OUTPUT_FILE = "output.log"
STOP_GRACE_S = 30
TAIL_BYTES = 64 * 1024
_ID = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{2}-[0-9]{2}-[0-9]{2}-[0-9a-f]{4}")
_RUN_FOLDER = re.compile(r"^recipe [\w.-]+: run folder (?P<path>.+)$", re.M)
# The engine's own lines about its stages (what `ui.live` reads of a run's log), and its
# one-line refusals and failures: what the job page lists above the output's tail.
_EVENT = re.compile(
    rb"(\[recipe_engine\]\[\w+\] - (stage [\w.-]+: (loading|cached at|committed|resuming from)"
    rb" .*)|^error: .*)"
)


@dataclass(frozen=True)
class Command:
    """An engine command: its arguments after `python -m recipe_engine`, run in `cwd`."""

    args: tuple[str, ...]
    cwd: str

    @property
    def verb(self) -> str:
        return self.args[0] if self.args and "=" not in self.args[0] else "run"

    def shown(self) -> str:
        """The line to type in a terminal (in `cwd`) for the same command."""
        import shlex

        return shlex.join(["python", "-m", "recipe_engine", *self.args])


@dataclass
class Job:
    """One command the view started, as its record holds it."""

    id: str
    args: list[str]
    cwd: str
    started: float
    pid: int
    recipes: list[str] = field(default_factory=list)
    ended: float | None = None
    returncode: int | None = None
    stop_asked: float | None = None

    @property
    def command(self) -> Command:
        return Command(tuple(self.args), self.cwd)

    @property
    def state(self) -> str:
        """running | stopping | stopped | finished | failed."""
        if self.ended is None:
            return "stopping" if self.stop_asked else "running"
        if self.stop_asked:
            return "stopped"
        return "finished" if self.returncode == 0 else "failed"

    @property
    def going(self) -> bool:
        return self.ended is None

    @property
    def started_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))


class Jobs:
    """The jobs started by this view (and earlier servers on the same output_root)."""

    def __init__(self, root: Path, python: str) -> None:
        self.root = root
        self.folder = root / WORKBENCH / "jobs"
        self.python = python
        self._processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._events: dict[str, tuple[int, list[str]]] = {}  # job -> (bytes read, events)

    # ------------------------------------------------------------------ starting, stopping

    def start(self, command: Command, recipes: list[str]) -> Job:
        """The command as a process of its own, its output to the job's log."""
        job_id = time.strftime("%Y-%m-%d_%H-%M-%S") + "-" + os.urandom(2).hex()
        folder = self.folder / job_id
        folder.mkdir(parents=True)
        with (folder / OUTPUT_FILE).open("wb") as output:
            process = subprocess.Popen(
                [self.python, "-m", "recipe_engine", *command.args],
                cwd=command.cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: Stop reaches its children
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        job = Job(job_id, list(command.args), command.cwd, time.time(), process.pid, recipes)
        with self._lock:
            self._processes[job_id] = process
        self._write(job)
        return job

    def stop(self, job_id: str) -> Job:
        """Ctrl-C to the job's processes; SIGTERM, then SIGKILL, if they do not end."""
        job = self.get(job_id)
        if not job.going:
            raise Refused(f"job {job_id} has ended already ({job.state})")
        job.stop_asked = time.time()
        self._write(job)
        self._signal(job, signal.SIGINT)
        timer = threading.Timer(STOP_GRACE_S, self._insist, args=(job_id,))
        timer.daemon = True
        timer.start()
        return job

    def _insist(self, job_id: str) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            job = self.get(job_id)
            if not job.going:
                return
            self._signal(job, sig)
            time.sleep(STOP_GRACE_S)

    def _signal(self, job: Job, sig: signal.Signals) -> None:
        try:
            os.killpg(job.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # it ended meanwhile

    def close(self) -> None:
        """The server stops: the runs it started go on (they are the engine's own commands);
        their processes are left to the system to reap."""
        with self._lock:
            self._processes.clear()

    # ------------------------------------------------------------------ reading

    def get(self, job_id: str) -> Job:
        if not _ID.fullmatch(job_id):
            raise Refused(f"`{job_id}` is not a job of this view")
        path = self.folder / job_id / JOB_FILE
        if not path.is_file():
            raise Refused(f"`{job_id}` is not a job of this view")
        return self._update(_load(path))

    def all(self) -> list[Job]:
        """Every job, newest first."""
        found = sorted(self.folder.glob(f"*/{JOB_FILE}")) if self.folder.is_dir() else []
        jobs = []
        for path in reversed(found):
            if _ID.fullmatch(path.parent.name):
                jobs.append(self._update(_load(path)))
        return jobs

    def output(self, job: Job) -> str:
        """The end of the job's output as a terminal shows it: of a line a progress bar
        rewrote (carriage returns), its last state."""
        path = self.folder / job.id / OUTPUT_FILE
        if not path.is_file():
            return ""
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
        lines = (line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))
        return "\n".join(lines)

    def events(self, job: Job) -> list[str]:
        """The engine's lines about the job's stages (loading, resuming from a checkpoint,
        committed, cached) and its error lines, from the whole output: the tail shown below
        them scrolls past. Read on from where the last call stopped."""
        path = self.folder / job.id / OUTPUT_FILE
        with self._lock:
            done, found = self._events.get(job.id, (0, []))
        if not path.is_file():
            return found
        with path.open("rb") as handle:
            handle.seek(done)
            text = handle.read()
        whole = text[: text.rfind(b"\n") + 1]  # a line still being written waits
        found = found + [
            match[2].decode(errors="replace") if match[2] else match[0].decode(errors="replace")
            for line in re.split(rb"[\r\n]", whole)
            if (match := _EVENT.search(line))
        ]
        with self._lock:
            self._events[job.id] = (done + len(whole), found)
        return found

    def run_folders(self, job: Job) -> list[str]:
        """The run folders (relative to output_root) the job made: those its output names
        once it has ended, else those Hydra made in its folder since it started, of its
        recipes (a run folder's name is the time Hydra started it)."""
        named = [Path(m["path"].strip()) for m in _RUN_FOLDER.finditer(self.output(job))]
        found = [p for p in named if p.is_relative_to(self.root) and p.is_dir()]
        if found:
            return [p.relative_to(self.root).as_posix() for p in found]
        made = []
        for area in RUN_AREAS:
            for recipe in job.recipes:
                base = self.root / area / recipe
                for run in sorted(base.iterdir()) if base.is_dir() else []:
                    if _made_by(run, job):
                        made.append(run.relative_to(self.root).as_posix())
        return made

    def job_of_run(self, run: str) -> Job | None:
        """The job (newest first) that made the run folder `run` (relative), if any."""
        return next((job for job in self.all() if run in self.run_folders(job)), None)

    # ------------------------------------------------------------------ records

    def _update(self, job: Job) -> Job:
        """The record with how its process ended, once it has (written back once)."""
        if not job.going:
            return job
        with self._lock:
            process = self._processes.get(job.id)
        if process is not None:
            code = process.poll()
            if code is None:
                return job
            job.returncode = code
        elif _alive(job.pid):
            return job  # started by an earlier server, still going
        job.ended = time.time()
        self._write(job)
        with self._lock:
            self._processes.pop(job.id, None)
        return job

    def _write(self, job: Job) -> None:
        atomic_write_text(self.folder / job.id / JOB_FILE, json.dumps(asdict(job), indent=2) + "\n")


def _load(path: Path) -> Job:
    data = json.loads(path.read_text())
    return Job(**{key: data[key] for key in Job.__dataclass_fields__ if key in data})


def _alive(pid: int) -> bool:
    """Whether `pid` is a live engine process (an earlier server's job)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"recipe_engine" in command


def _made_by(run: Path, job: Job) -> bool:
    """Whether Hydra made the run folder for this job: in its folder, at or after its start
    (the folder's name is Hydra's start time), before it ended."""
    try:
        made = time.mktime(time.strptime(run.name, "%Y-%m-%d_%H-%M-%S"))
    except ValueError:
        return False
    if made < int(job.started) - 1 or (job.ended is not None and made > job.ended + 1):
        return False
    saved = run / ".hydra" / "hydra.yaml"
    try:
        hydra = yaml.safe_load(saved.read_text()) if saved.is_file() else None
    except yaml.YAMLError:
        return False
    cwd = ((hydra or {}).get("hydra") or {}).get("runtime", {}).get("cwd")
    return cwd is not None and Path(cwd).resolve() == Path(job.cwd).resolve()
