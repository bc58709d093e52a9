"""Files the engine writes: atomically (never half a file), under a lock when shared."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from filelock import FileLock


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write aside, then rename into place: readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str))


def file_lock(path: Path, timeout: float = -1) -> FileLock:
    """An exclusive lock on `path` (created with its folder), shared across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)
