"""Driving the engine as a user does: `python -m recipe_engine ...` in a process of its own."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The checkout under test first on the path: interpreters a command starts afresh (torchrun's
# workers, submitit's jobs) import it too, whatever is installed.
USER_PATH = os.environ.get("PYTHONPATH")
CHECKOUT_PATH = os.pathsep.join(
    dict.fromkeys(filter(None, [str(ROOT), *(USER_PATH or "").split(os.pathsep)]))
)
# Variables read only when the engine or a library gets to them, never while importing: a
# child forked from the imported engine can take them with any value. (TMPDIR is read while
# importing, but the child clears what tempfile settled then: tests/forked_engine.py. MLflow
# reads its variables when a run starts, huggingface_hub its token when it sends a request.)
READ_LATE = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTEST_CURRENT_TEST",
        "RECIPE_ENGINE_CACHE",
        "TMPDIR",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "HF_TOKEN",
    }
)


def engine(
    *args: str,
    cwd: Path,
    timeout: int = 600,
    env: dict[str, str] | None = None,
    fresh: bool = False,
    fork: bool = False,
) -> subprocess.CompletedProcess:
    """`python -m recipe_engine ARGS` in `cwd`, its output captured. It is forked from a
    process that imported the engine with this process's variables (tests/forked_engine.py),
    unless `fresh`, or the test's own `env` differs from them in a variable read while
    importing, or OpenMP is not on one thread (a fork after its thread pool started could
    hang): those run as fresh processes. `fork`: the test's own variables too are imported
    once, by a process of their own that forks this command and the next ones that have them
    (the hub tests' HF_ENDPOINT and HF_HOME, say)."""
    env = command_env(env or os.environ)
    command = [sys.executable, "-m", "recipe_engine", *args]
    own_imports = imported(env) != imported(command_env(os.environ))
    if fresh or (own_imports and not fork) or env.get("OMP_NUM_THREADS") != "1":
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    return ForkedEngine.for_env(env).run(command, cwd=cwd, env=env, timeout=timeout)


def imported(env: Mapping[str, str], read_late: Iterable[str] = ()) -> dict[str, str]:
    """The variables a process reads while importing: all but those read late."""
    late = READ_LATE | set(read_late)
    return {key: value for key, value in env.items() if key not in late}


def forked_engine(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    prelude: Path | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """`engine(*args)` always forked, OpenMP on one thread, with `prelude` (a Python file) run
    first in the child: a test arms a fault there. `env`: variables added for this command,
    read by the prelude or late by the engine."""
    added = dict(env or {})
    whole = {**single_thread_env(), **added}
    return ForkedEngine.for_env(whole, read_late=added.keys()).run(
        [sys.executable, "-m", "recipe_engine", *args],
        cwd=cwd,
        env=whole,
        timeout=timeout,
        prelude=prelude,
    )


def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """A command's variables: unbuffered output, and the checkout first on the path unless the
    test set its own."""
    env = {**env, "PYTHONUNBUFFERED": "1"}
    if env.get("PYTHONPATH") == USER_PATH:
        env["PYTHONPATH"] = CHECKOUT_PATH
    return env


def single_thread_env() -> dict[str, str]:
    """This process's variables for a command, OpenMP on one thread (as `make test` has it)."""
    return command_env({**os.environ, "OMP_NUM_THREADS": "1"})


class ForkedEngine:
    """tests/forked_engine.py, serving one command at a time: one per test process, started
    again whenever a command's variables differ from those it imported with (a library of
    the test process set one, say), outside those read late."""

    _shared: ForkedEngine | None = None

    def __init__(self, import_env: dict[str, str]) -> None:
        self.import_env = import_env
        self.lock = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="forked-engine-"))
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forked_engine.py"))],
            env=import_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(self.close)

    @classmethod
    def for_env(cls, env: Mapping[str, str], read_late: Iterable[str] = ()) -> ForkedEngine:
        import_env = imported(env, read_late)
        if cls._shared is None or cls._shared.import_env != import_env:
            if cls._shared is not None:
                cls._shared.close()
            cls._shared = cls(import_env)
        return cls._shared

    def run(
        self,
        command: list[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        prelude: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """The command (`python -m recipe_engine` and its arguments) run by a forked child;
        past `timeout` seconds its process group is killed and TimeoutExpired raised."""
        out, err = self.scratch / "stdout", self.scratch / "stderr"
        request = {
            "args": command[3:],
            "cwd": str(cwd),
            "env": env,
            "stdout": str(out),
            "stderr": str(err),
            "timeout": timeout,
            "prelude": str(prelude) if prelude else None,
        }
        with self.lock:
            done = self.ask(request)
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if done["timed_out"]:
            raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(command, done["rc"], stdout, stderr)

    def ask(self, request: dict) -> dict:
        """Send a request and read its answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"tests/forked_engine.py ended (exit code {self.process.wait()})"
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # it exits once stdin ends
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def manifests(output_root: Path) -> dict[str, dict]:
    """{stage name: manifest} of every complete entry in the store."""
    found = {}
    for path in sorted(output_root.glob("store/*/manifest.json")):
        if (path.parent / "COMPLETE").is_file():
            manifest = json.loads(path.read_text())
            found[manifest["stage"]] = manifest
    return found


def weight_hashes(output_root: Path) -> dict[str, dict[str, str]]:
    """{stage name: {weight file: sha256}} of every complete stage in the store."""
    stages = {}
    for path in sorted(output_root.glob("store/*/manifest.json")):
        if not (path.parent / "COMPLETE").is_file():
            continue
        name = json.loads(path.read_text())["stage"]
        files = sorted(path.parent.glob("*.safetensors"))
        stages[name] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    return stages


def stored_stages(output_root: Path) -> list[str]:
    """The stage of every complete store entry, sorted (one name per entry)."""
    return sorted(
        json.loads(path.read_text())["stage"]
        for path in output_root.glob("store/*/manifest.json")
        if (path.parent / "COMPLETE").is_file()
    )


# r1 / r3 as the CLI tests run them: 16 rows, every stage 2 steps, 4 rows scored.
SHORT_STAGES = (
    "output_root=out",
    "data.max_samples=16",
    "eval.max_samples=4",
    "++stage.llm.train.max_steps=2",
    "++stage.vision.train.max_steps=2",
)


def start_engine(*args: str, cwd: Path) -> subprocess.Popen:
    """`python -m recipe_engine ...` left running (output merged, unbuffered), in its own
    process group so that `stop_group` stops it with its children (torchrun, a compare)."""
    return start_group([sys.executable, "-m", "recipe_engine", *args], cwd=cwd)


def start_group(
    command: list[str], cwd: Path, log: Path | None = None, **env: str
) -> subprocess.Popen:
    """`command` left running in its own process group, its output piped (or into `log`),
    with these variables added to the test's."""
    out = log.open("w") if log is not None else subprocess.PIPE
    try:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            start_new_session=True,
        )
    finally:
        if log is not None:
            out.close()  # the child holds its own copy


def stop_group(process: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM to the process's group, SIGKILL after `grace` seconds; reaped either way."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launcher_env(folder: Path) -> dict[str, str]:
    """This process's variables with TMPDIR at `folder`, for a launcher a test starts itself:
    torch's elastic agent (torchrun, accelerate launch) leaves a `torchelastic_*` folder in
    the temporary directory, so the test's own folder takes it, not /tmp."""
    return {**os.environ, "TMPDIR": str(folder)}
