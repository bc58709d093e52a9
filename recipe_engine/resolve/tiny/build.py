"""Build once: a tiny artefact is built into a hidden folder beside its target and renamed into
place, so a folder at the target path is always complete; a lock (`<cache>/locks/`) makes a
second process wait for the first build instead of repeating it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from recipe_engine.files import file_lock, share_as_umask

# Bump whenever a change alters what gets built, so stale caches are never mistaken for the
# new artefacts (the version is part of every tiny model's and dataset's folder name, and of the
# key of every stage that starts from a tiny model). v4: models built on one thread.
VERSION = "v4"
SEED = 1234


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build`` into a temp folder and rename it to ``target``, unless target exists."""
    # Only complete folders ever appear at `target` (they arrive by rename), so existence is
    # enough to trust it.
    if target.is_dir():
        return target
    # The lock lives in <cache>/locks/: models/ and data/ hold only complete artefacts.
    lock = target.parent.parent / "locks" / f"{target.parent.name}-{target.name}.lock"
    with file_lock(lock):
        if not target.is_dir():  # else another process built it while this one waited
            _build_into(target, build)
    return target


def _build_into(target: Path, build: Callable[[Path], None]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        build(tmp)
        share_as_umask(tmp)  # mkdtemp and safetensors make private files; a cache may be shared
        try:
            os.rename(tmp, target)
        except OSError:
            # A builder that took no lock (an older engine sharing this cache) came first.
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
