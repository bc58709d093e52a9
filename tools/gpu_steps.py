"""How `gpu_report` runs its steps: each a command with its own limit, inside the report's
budget, its whole output kept in a log file; steps that time nothing run side by side.

A lease is short (15 minutes here), and an engine process takes 30-60 s on the GPU machine
before its first step, so steps whose result is a pass or a commit (not a time) share the
machine: the card has memory for all of them, and none of them is a measurement of speed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from tools.gpu_models import TINY_CACHE

BUDGET_S = 25 * 60
RAN, FAILED, NOT_RUN = "ran", "failed", "not run"


@dataclass(frozen=True)
class Step:
    """One command of the report: its section, what it needs besides Python, its limit, and
    how its result is read from its scratch folder (a line for the report)."""

    section: str
    name: str
    command: tuple[str, ...]
    limit_s: int
    needs: tuple[str, ...] = ("cuda",)
    runs_dry: bool = False  # runs on a CPU in the dry mode (as it is: it is cheap there)
    dry_args: tuple[str, ...] = ()  # in the dry mode it runs on a CPU, with these added
    result: Callable[[str], str] = lambda output: ""  # from what it printed and wrote
    alone: bool = True  # it times something: nothing else runs beside it
    group: str = ""  # the name `--only` picks it by (with `group:name`); "" serves every group
    serves: tuple[str, ...] = ()  # the groups it prepares: picked with any of theirs

    def shown(self) -> str:
        return shlex.join(self.command)

    def picked_by(self, only: Sequence[str]) -> bool:
        return (
            not only
            or not self.group
            or any(
                word in (self.group, f"{self.group}:{self.name}")
                or word.split(":")[0] in self.serves
                for word in only
            )
        )

    def log_name(self, stream: str) -> str:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{self.group}-{self.name}").strip("-")
        return f"{name}.{stream}.log"


@dataclass(frozen=True)
class Outcome:
    step: Step
    status: str  # RAN | FAILED | NOT_RUN
    seconds: float = 0.0
    result: str = ""  # what it measured, or why it failed / did not run
    output: str = ""  # the tail of what it printed


@dataclass(frozen=True)
class Machine:
    """What this machine offers the steps."""

    gpu: str  # the card's name, "" without CUDA
    installed: frozenset[str]

    def missing(self, step: Step) -> str:
        """Why `step` cannot run here, "" when it can."""
        for need in step.needs:
            if need == "cuda" and not self.gpu:
                return "no CUDA"
            if need != "cuda" and need not in self.installed:
                return f"{need} not installed"
        return ""


# What reading a step's result may raise: its files missing or odd, or, without the wheelhouse
# on this process's path, a reader's import.
UNREADABLE = (OSError, ValueError, KeyError, RuntimeError, ZeroDivisionError, ImportError)


@dataclass
class Started:
    """A step's process, running in its own process group (torchrun's workers with it)."""

    step: Step
    process: subprocess.Popen[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    started: float
    limit_s: float
    cut_by_budget: bool  # its limit is what the budget had left, not its own


@dataclass
class Session:
    """One report's run: where steps write, the machine, the clock, what each step did."""

    folder: Path
    machine: Machine
    dry: bool
    budget_s: float = BUDGET_S
    only: tuple[str, ...] = ()  # groups or `group:name`s to run; () runs every step
    started: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, step: Step) -> Outcome:
        return self.run_together([step])[0]

    def run_steps(self, steps: Sequence[Step]) -> None:
        """Each step that times something alone; the others, side by side, in order."""
        beside: list[Step] = []
        for step in steps:
            if step.alone:
                self.run_together(beside)
                beside = []
                self.run(step)
            else:
                beside.append(step)
        self.run_together(beside)

    def run_together(self, steps: Sequence[Step]) -> list[Outcome]:
        """Start every step that can run here, wait for each within its limit, and record
        them all in the order given."""
        decided: dict[int, Outcome] = {}
        running: list[tuple[int, Started]] = []
        for index, step in enumerate(steps):
            why = self._why_not(step)
            if self.dry or not why:  # the dry mode prints what each step would run
                print(f"$ {step.shown()}", flush=True)
            if why:
                decided[index] = Outcome(step, NOT_RUN, result=why)
            else:
                command = dry_command(step) if self.dry else step.command
                running.append((index, self._start(replace(step, command=command))))
        for index, started in running:
            decided[index] = self._finish(started)
        outcomes = [decided[index] for index in range(len(steps))]
        for outcome in outcomes:
            print(f"  -> {outcome.step.name}: {outcome.status}: {outcome.result}", flush=True)
        self.outcomes.extend(outcomes)
        return outcomes

    def keep_logs(self, archive: Path) -> Path:
        """Every step's whole output and the runs' own logs, in one archive (what a lease
        brings back: a few files, however many steps ran)."""
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            for log in sorted(self.folder.rglob("*.log")):
                tar.add(log, arcname=str(log.relative_to(self.folder)))
        return archive

    def _why_not(self, step: Step) -> str:
        if not step.picked_by(self.only):
            return f"not picked (--only {' '.join(self.only)})"
        if self.dry and (step.runs_dry or step.dry_args):
            return ""
        why = self.machine.missing(step)
        if self.dry:
            return f"dry mode{f'; here: {why}' if why else ''}"
        if not why and self.left_s() < 30:
            return "out of time (the report's budget was spent)"
        return why

    def _start(self, step: Step) -> Started:
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stdout, stderr = ((logs / step.log_name(s)).open("w+b") for s in ("stdout", "stderr"))
        limit = min(step.limit_s, max(self.left_s(), 1))
        process = subprocess.Popen(
            step.command, stdout=stdout, stderr=stderr, env=step_env(self.folder),
            start_new_session=True,
        )  # fmt: skip
        return Started(step, process, stdout, stderr, time.monotonic(), limit,
                       limit < step.limit_s)  # fmt: skip

    def _finish(self, started: Started) -> Outcome:
        step, process = started.step, started.process
        try:
            process.wait(timeout=max(started.limit_s - (time.monotonic() - started.started), 0))
        except subprocess.TimeoutExpired:
            stop_group(process)
            seconds, output = time.monotonic() - started.started, read_logs(started)[1]
            why = (f"stopped after {started.limit_s:.0f} s: the report's budget ran out"
                   if started.cut_by_budget
                   else f"stopped at its limit ({started.limit_s:.0f} s)")  # fmt: skip
            return Outcome(step, FAILED, seconds, why, tail(output))
        seconds, (printed, output) = time.monotonic() - started.started, read_logs(started)
        if process.returncode != 0:
            why = f"exit {process.returncode}: {last_line(output) or 'no output'}"
            return Outcome(step, FAILED, seconds, why, tail(output))
        try:
            result = step.result(printed)
        except UNREADABLE as error:
            return Outcome(step, FAILED, seconds, f"ran, but {error}", tail(output))
        return Outcome(step, RAN, seconds, result or "exit 0", tail(output))


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """End a step and every process it started (torchrun's workers hold the GPU)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def read_logs(started: Started) -> tuple[str, str]:
    """What a finished step printed to stdout, and everything it printed (stdout, then its
    stderr: a failure's last line is its error)."""
    printed, errors = (_read(log) for log in (started.stdout, started.stderr))
    return printed, f"{printed}\n{errors}".strip()


def _read(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0)
    text = log.read().decode(errors="replace")
    log.close()
    return text


def dry_command(step: Step) -> tuple[str, ...]:
    """What a step runs in the dry mode: gpu_check says what it would run, without CUDA; a
    step with `dry_args` runs with them (a benchmark's own dry run)."""
    if step.dry_args:
        return (*step.command, *step.dry_args)
    if step.name != "gpu_check":
        return step.command
    checks = step.command[3 : step.command.index("--out")]
    return (*step.command[:3], *checks, "--dry-run")


def step_env(folder: Path) -> dict[str, str]:
    """The steps' environment: offline, the wheelhouse's packages first on the path, and the
    engine's cache under `folder` where the report laid the carried one (`TINY_CACHE`)."""
    site = folder / "site-packages"
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if (folder / TINY_CACHE).is_dir():
        env["RECIPE_ENGINE_CACHE"] = str(folder / TINY_CACHE)
    return env


def last_line(output: str) -> str:
    return (output.strip().splitlines() or [""])[-1]


def last_line_with(output: str, text: str) -> str:
    """The last line holding `text` (a summary printed before the run's own lines), else the
    last line."""
    found = (line for line in reversed(output.splitlines()) if text in line)
    return next(found, last_line(output))


def tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])
