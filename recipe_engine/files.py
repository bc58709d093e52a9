"""Files the engine writes: atomically (never half a file), under a lock when shared, and
readable by whoever the user's umask lets read them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from filelock import FileLock

# A JSON object as the engine reads or writes it (a record's file, a recorded config): the
# edge where typed records become JSON and back. Inside the engine, records are dataclasses.
JsonObject = dict[str, Any]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write aside, then rename into place: readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str))


def current_umask() -> int:
    """The process umask. Read from /proc where possible: `os.umask` can only read it by
    setting it, which for a moment changes it for every thread of the process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_as_umask(folder: Path) -> None:
    """Give `folder` and everything in it the mode a plain `open` / `mkdir` would: files
    0666 and folders 0777, less the umask (0644 / 0755 under the usual 022).

    safetensors (and mkdtemp, mkstemp) write private 0600 files, so without this a store or
    cache shared by a group holds weights only their writer can read. Symlinks are left alone:
    chmod would follow them out of the folder.
    """
    mask = current_umask()
    for path in (folder, *folder.rglob("*")):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def file_lock(path: Path, timeout: float = -1) -> FileLock:
    """An exclusive lock on `path` (created with its folder), shared across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)


def default_cache_dir() -> Path:
    """``$RECIPE_ENGINE_CACHE`` if set, else ``$XDG_CACHE_HOME/recipe-engine``, else
    ``~/.cache/recipe-engine``: the user's cache, never the package's folder (an installed
    package may be read-only, shared by users, and replaced on upgrade)."""
    env = os.environ.get("RECIPE_ENGINE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "recipe-engine"
