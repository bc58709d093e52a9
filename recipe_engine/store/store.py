"""The stage store: content-addressed stage outputs under `<output_root>/store/`.

A stage's output lives at `store/<fingerprint>/` and becomes visible only through an atomic
commit: it is written inside `store/<fingerprint>.partial/`, renamed into place, and the
`COMPLETE` marker is written last. Anything without the marker is never used as a parent.
The partial folder also holds the trainer's checkpoints, so an interrupted stage resumes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from filelock import FileLock

from recipe_engine.errors import RecipeError
from recipe_engine.files import file_lock, share_as_umask
from recipe_engine.store.records import Manifest

COMPLETE = "COMPLETE"
# In every folder the engine creates under the store: `runs gc` deletes nothing without it.
ENGINE_MARKER = ".recipe-engine"
KEY_LENGTH = 20  # hex characters of the fingerprint in folder names


class Store:
    def __init__(self, output_root: str | Path) -> None:
        self.root = Path(output_root).resolve() / "store"

    def entry(self, fingerprint: str) -> Path:
        return self.root / fingerprint[:KEY_LENGTH]

    def is_complete(self, fingerprint: str) -> bool:
        return (self.entry(fingerprint) / COMPLETE).is_file()

    def work_dir(self, fingerprint: str) -> Path:
        return self.root / f"{fingerprint[:KEY_LENGTH]}.partial"

    def make_work_dir(self, fingerprint: str) -> Path:
        """The stage's work folder (checkpoints, the output being written), marked as ours."""
        return make_engine_folder(self.work_dir(fingerprint))

    def merged_dir(self, fingerprint: str, dtype: str) -> Path:
        """An adapter stage merged into its base: the full-weights base its children use."""
        return self.root / f"{fingerprint[:KEY_LENGTH]}.merged-{dtype}"

    def checkpoints(self, fingerprint: str) -> Path:
        return self.work_dir(fingerprint) / "checkpoints"

    def latest_checkpoint(self, fingerprint: str) -> Path | None:
        """The newest complete trainer checkpoint of an interrupted stage, if any."""
        return next(iter(self.complete_checkpoints(fingerprint)), None)

    def complete_checkpoints(self, fingerprint: str) -> list[Path]:
        """The complete trainer checkpoints of an interrupted stage, newest first."""
        folder = self.checkpoints(fingerprint)
        found = []
        for path in folder.glob("checkpoint-*") if folder.is_dir() else []:
            match = re.fullmatch(r"checkpoint-(\d+)", path.name)
            if match and _checkpoint_complete(path, int(match.group(1))):
                found.append((int(match.group(1)), path))
        return [path for _, path in sorted(found, reverse=True)]

    def commit(self, fingerprint: str, built: Path) -> Path:
        """Move a fully written output folder into place, then mark it complete."""
        target = self.entry(fingerprint)
        if target.exists():  # a previous commit died before its marker: replace it
            stale = target.with_name(target.name + ".stale")
            _remove(stale)  # left by a kill during an earlier clean-up
            os.replace(target, stale)
            _remove(stale)
        mark_engine_folder(built)
        share_as_umask(built)  # safetensors writes 0600: a store shared by a group could not load
        os.replace(built, target)
        marker = target / COMPLETE
        marker.write_text(json.dumps({"fingerprint": fingerprint}))
        _fsync_dir(target)
        return target

    def lock(self, fingerprint: str) -> FileLock:
        """Exclusive per-fingerprint lock: concurrent jobs needing one stage train it once."""
        return file_lock(self.root / "locks" / f"{fingerprint[:KEY_LENGTH]}.lock")

    def claim(self, fingerprint: str) -> FileLock:
        """A run's claim on the stage it has sent to a cluster, held by its driver while the
        stage's task runs: a concurrent run waits off the cluster (the task itself takes
        `lock` only once it starts on its node)."""
        return file_lock(self.root / "locks" / f"{fingerprint[:KEY_LENGTH]}.claim", timeout=0)

    def manifest(self, fingerprint: str) -> Manifest:
        return Manifest.load(self.entry(fingerprint))


def make_engine_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    mark_engine_folder(path)
    return path


def mark_engine_folder(path: Path) -> None:
    (path / ENGINE_MARKER).write_text("written by recipe-engine; `runs gc` may remove it\n")


def is_engine_folder(path: Path) -> bool:
    """Whether the engine wrote this store folder: its marker, or (entries committed before
    markers existed) a COMPLETE marker naming the folder's own key."""
    if (path / ENGINE_MARKER).is_file():
        return True
    try:
        fingerprint = json.loads((path / COMPLETE).read_text()).get("fingerprint", "")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(fingerprint, str) and fingerprint[:KEY_LENGTH] == path.name[:KEY_LENGTH]


# What a run writes into under output_root: each that exists already must take new files.
WRITTEN_FOLDERS = ("store", "store/locks", "runs", "sweeps", "experiments")


def check_output_root(root: str | Path) -> None:
    """The folders a run writes into can be made and written: refused before a run writes
    anything. Each is tried with a file made and removed at once, since permission bits do not
    tell (root passes them; an immutable folder or a read-only mount refuses root too)."""
    path = Path(root).expanduser()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise RecipeError(
            f"`output_root={root}`: {existing} is a file, not a folder. Point output_root at "
            "a folder (it is created if missing).",
            key="output_root",
        )
    folders = [existing] + [path / f for f in WRITTEN_FOLDERS if (path / f).exists()]
    for folder in folders:
        why = _unwritable(folder)
        if why:
            raise RecipeError(
                f"`output_root={root}`: {folder} {why}, and a run writes there. Make it "
                "writable by this user, or choose another output_root (e.g. "
                "output_root=~/recipe-outputs).",
                key="output_root",
            )


def _unwritable(folder: Path) -> str | None:
    if not folder.is_dir():
        return "is a file, not a folder"
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".recipe-engine-probe-")
    except OSError as error:
        return f"is not writable ({error.strerror})"
    os.close(handle)
    os.unlink(probe)
    return None


def _checkpoint_complete(path: Path, step: int) -> bool:
    """trainer_state.json is written last, but not atomically: it must parse and match the step."""
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return state.get("global_step") == step


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def relative_in_store(location: str, store: Store) -> str:
    """A path inside the store as `./<entry>` (relative to the store); anything else as is.

    What records and adapter configs name a parent stage (or a merged parent) by, so a store
    that is moved or copied elsewhere still finds it: readers resolve it against the store.
    """
    path = Path(location)
    if path.is_absolute() and path.resolve().is_relative_to(store.root):
        return "./" + path.resolve().relative_to(store.root).as_posix()
    return location
