"""What runs on a Ray node for the driver (`driver`): the check that a node finds what the
stages will run (the engine, the run's folder, the user's code of each stage, by content),
the first node's address and a free port for a multi-node stage, and the stage itself.

A stage runs as the engine's own command (`stage_command`) in a process of its own, in a
session of its own: when the driver cancels the task (Ctrl-C, `ray job stop`, a sibling
node's failure) the whole session is stopped, torchrun's workers with it, and a process left
without its Ray worker (a node lost) is sent SIGTERM by the kernel. The store's commit is
atomic, so a stage stopped anywhere leaves nothing half-written in it; its work folder keeps
the checkpoints it resumes from.

`python -m recipe_engine.launchers.ray.node CHECK` is the check, run in a process of its own
on each node, as a stage's process would see that node.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from recipe_engine.capabilities import StageCode
from recipe_engine.launchers.stage_command import Rendezvous, node_command

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 20  # SIGTERM first (torchrun passes it to its workers), then SIGKILL


@dataclass(frozen=True)
class NodeRun:
    """How a stage's process on one node ended."""

    exit_code: int
    said: str  # its last message: the engine's one-line `error: ...`, else its last line
    node: str


@dataclass(frozen=True)
class StageTask:
    """What one node's task runs: the stage's command line, in its folder, where the run
    started (None: the task's own folder, a shipped working_dir), with the driver's variables;
    its output kept in `log`."""

    arguments: tuple[str, ...]
    stage_dir: str
    cwd: str | None
    env: dict[str, str]
    log: str


@dataclass(frozen=True)
class NodeCheck:
    """What the driver asks every node to find before a stage is submitted."""

    version: str  # the engine's, on the driver
    cwd: str | None  # where the stages run (None: the task's own, a shipped working_dir)
    code: tuple[StageCode, ...]


def node_name() -> str:
    """This node as the driver names it: its address and its id's first characters."""
    import ray

    context = ray.get_runtime_context()
    return f"{ray.util.get_node_ip_address()} ({context.get_node_id()[:8]})"


def rendezvous_point() -> tuple[str, int]:
    """This node's address and a port free on it: where a multi-node stage's nodes meet."""
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return ray.util.get_node_ip_address(), port


def check_node(check: NodeCheck, env: dict[str, str]) -> tuple[str, list[str]]:
    """This node's name and what it lacks (nothing: an empty list), seen by a process started
    as a stage's is: in the same folder, with the same environment."""
    cwd = check.cwd or os.getcwd()
    if not Path(cwd).is_dir():
        return node_name(), [
            f"the folder the run started in, {cwd}, is not on it (each stage runs there: put "
            "the run on a filesystem every node shares, or ship it with "
            "`ray.runtime_env.working_dir`)"
        ]
    command = [sys.executable, "-m", "recipe_engine.launchers.ray.node", _check_text(check)]
    done = subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        return node_name(), [f"the engine does not start there ({last[:300]})"]
    return node_name(), json.loads(done.stdout.strip().splitlines()[-1])


def run_stage(task: StageTask, rendezvous: Rendezvous | None) -> NodeRun:
    """The stage's process on this node (torchrun on each of several, meeting at
    `rendezvous`), its output kept in the task's log and streamed to the driver; how it
    ended."""
    command = node_command(task.arguments, task.stage_dir, rendezvous)
    Path(task.log).parent.mkdir(parents=True, exist_ok=True)
    node = node_name()
    last_line = last_error = ""
    with open(task.log, "a", encoding="utf-8", errors="replace") as kept:
        kept.write(f"--- on {node}: {' '.join(command)}\n")
        process = subprocess.Popen(
            command,
            cwd=task.cwd or os.getcwd(),
            env={**os.environ, **task.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_ended_with_this_process(),
        )
        try:
            assert process.stdout is not None
            for line in process.stdout:
                kept.write(line)
                kept.flush()
                sys.stdout.write(line)
                shown = line.rpartition("\r")[2].strip()  # a progress bar's last state
                last_line = shown or last_line
                last_error = shown if shown.startswith("error:") else last_error
            code = process.wait()
        except BaseException:  # cancelled by the driver: the stage's whole session stops
            _stop(process)
            raise
    said = last_error or last_line
    if code < 0:  # stopped by a signal: what stopped it says more than its last output
        said = f"killed by {signal.Signals(-code).name}; its last output: {last_line}"
    return NodeRun(code, said[:500], node)


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _ended_with_this_process():  # noqa: ANN202 (a preexec_fn)
    """The child asks the kernel for SIGTERM when the Ray worker that started it dies (its
    node lost), so no stage trains on without its task. libc is looked up before the fork:
    the child only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return ask


def _check_text(check: NodeCheck) -> str:
    return json.dumps(asdict(check))


def _problems(check: NodeCheck) -> list[str]:
    """Run in the stage's folder by `python -m`: what this node lacks, one line each."""
    from recipe_engine.errors import RecipeError
    from recipe_engine.user_code import function_digest
    from recipe_engine.versions import package_version

    problems = []
    version = package_version("recipe-engine")
    if version != check.version:
        problems.append(f"recipe-engine {version} is installed, the driver has {check.version}")
    for code in check.code:
        try:
            digest = function_digest(code.key, code.target)
        except RecipeError as error:
            problems.append(f"`{code.key}` ({code.target}): {error}")
            continue
        if digest != code.digest:
            problems.append(
                f"`{code.key}` ({code.target}) has other source than the planned one (the "
                "stage's key hashed the driver's)"
            )
    return problems


def main(argv: Sequence[str]) -> int:
    given = json.loads(argv[0])
    check = NodeCheck(
        given["version"], given["cwd"], tuple(StageCode(**code) for code in given["code"])
    )
    print(json.dumps(_problems(check)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
