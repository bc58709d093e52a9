"""Driving the engine as a user does: `python -m recipe_engine ...` in a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path


def engine(
    *args: str, cwd: Path, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipe_engine", *args],
        cwd=cwd,
        env={**(env or os.environ), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


def start_group(command: list[str], cwd: Path, log: Path | None = None) -> subprocess.Popen:
    """`command` left running in its own process group, its output piped (or into `log`)."""
    out = log.open("w") if log is not None else subprocess.PIPE
    try:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
