"""Driving the engine as a user does: `python -m recipe_engine ...` in a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
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
