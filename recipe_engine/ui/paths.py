"""What the UI may read: folders and files the engine wrote under output_root, nothing else.

Every path a request names is relative to output_root and checked here before anything is
read: no `..`, no absolute path, no symbolic link anywhere along it (one could point out of the
folder), an area the engine writes (`runs/`, `store/` ...) and, for a file, a name the engine
gives its records inside a folder it marked as its own. Anything else is `Refused`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from recipe_engine.store.records import MANIFEST_FILE, SUMMARY_FILE
from recipe_engine.store.store import ENGINE_MARKER, is_engine_folder

RUN_AREAS = ("runs", "sweeps")
AREAS = (*RUN_AREAS, "experiments", "store", "exports")
# The names of the files the engine writes, per area (fullmatch). Only these are served.
ENGINE_FILES: dict[str, tuple[str, ...]] = {
    "runs": (
        SUMMARY_FILE,
        r"loss\.png",
        r"compare[\w.-]*\.(png|md|csv|jsonl|json)",
        r"jobs\.json",
        r"traceback\.txt",
        r"[\w-]+\.log",  # Hydra's log of the job (app.log, run.log)
    ),
    "experiments": (r"experiment\.(md|csv)", r"experiment_\w+\.png"),
    "store": (MANIFEST_FILE, r"metrics\.jsonl", r"trainer_state\.json"),
    "exports": (r"README\.md", r"export\.json"),
}
ENGINE_FILES["sweeps"] = (*ENGINE_FILES["runs"], r"jobs\.jsonl", r"sweep\.(md|csv)")
# Sweep-level records sit beside the jobs' folders, in a folder Hydra made, not the engine.
SWEEP_FILES = ("jobs.jsonl", "sweep.md", "sweep.csv")


class Refused(Exception):
    """A request for something the UI does not serve (answered 404, saying why)."""


@dataclass(frozen=True)
class OutputFolder:
    """The output_root the UI serves (absolute, resolved)."""

    root: Path

    @classmethod
    def at(cls, root: Path) -> OutputFolder:
        return cls(root.expanduser().resolve())

    def inside(self, relative: str) -> Path:
        """`relative` under the root, refused when it could leave it or is not in an area."""
        parts = _parts(relative)
        if parts[0] not in AREAS:
            raise Refused(
                f"`{relative}` is not in one of the engine's folders ({', '.join(AREAS)})"
            )
        path = self.root
        for part in parts:
            path = path / part
            if path.is_symlink():
                raise Refused(f"`{relative}` passes through a symbolic link")
        if not path.exists():
            raise Refused(f"`{relative}` does not exist")
        if not path.resolve().is_relative_to(self.root):
            raise Refused(f"`{relative}` lies outside the output folder")
        return path

    def run_folder(self, relative: str) -> Path:
        """A run (or sweep job) folder the engine marked as its own."""
        path = self.inside(relative)
        if path.parts[len(self.root.parts)] not in RUN_AREAS or not path.is_dir():
            raise Refused(f"`{relative}` is not a run folder")
        if not (path / ENGINE_MARKER).is_file():
            raise Refused(f"`{relative}` was not written by recipe-engine (no {ENGINE_MARKER})")
        return path

    def engine_file(self, relative: str) -> Path:
        """A record the engine wrote: an engine file name, in a folder the engine wrote."""
        path = self.inside(relative)
        area = path.parts[len(self.root.parts)]
        names = ENGINE_FILES.get(area, ())
        if not path.is_file() or not any(re.fullmatch(n, path.name) for n in names):
            raise Refused(f"`{relative}` is not a file the engine writes")
        if not self._written_by_engine(path, area):
            raise Refused(f"`{relative}` is not in a folder recipe-engine wrote")
        return path

    def relative(self, path: Path) -> str:
        """How a page names `path`: relative to the root, with forward slashes."""
        return path.relative_to(self.root).as_posix()

    def _written_by_engine(self, path: Path, area: str) -> bool:
        folder = path.parent
        if area == "experiments":  # the engine's report names the folder as its own
            return (folder / "experiment.md").is_file()
        if area == "sweeps" and path.name in SWEEP_FILES:
            return (folder / "jobs.jsonl").is_file()
        area_root = self.root / area
        while folder != area_root:  # the stage, run or export folder, or one above it
            if (folder / ENGINE_MARKER).is_file() or (area == "store" and is_engine_folder(folder)):
                return True
            folder = folder.parent
        return False


def _parts(relative: str) -> tuple[str, ...]:
    """The parts of a relative path as a request gives it; absolute or `..` refused."""
    if not relative or "\\" in relative or "\0" in relative:
        raise Refused(f"`{relative}` is not a path the UI serves")
    posix = PurePosixPath(relative)
    if posix.is_absolute() or relative.startswith("~"):
        raise Refused(f"`{relative}` is absolute: pages name paths relative to the output folder")
    if any(part in ("..", ".") for part in relative.split("/")):
        raise Refused(f"`{relative}` climbs out with `..`")
    return posix.parts
