"""The `runs` verb: list runs and store entries, remove run folders, garbage-collect the store.

    python -m recipe_engine runs [output_root=DIR]           list runs and store entries
    python -m recipe_engine runs rm RUN_DIR [--dry-run]      remove a run (or sweep) folder
    python -m recipe_engine runs gc [--dry-run]              free unreferenced store entries

A run is any folder under `<output_root>/runs/` or `<output_root>/sweeps/` holding a
`summary.json`; its stage rows name the store entries it uses. `rm` never touches the store;
`gc` removes entries no remaining run references (nor is an ancestor of one that is, nor the
merged base one loads), plus leftover `.partial` / `.stale` folders whose per-key lock no
running job holds and old `.tmp` folders. Nothing outside `<output_root>` is ever deleted.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.launchers.records import JOBS_USAGE
from recipe_engine.store.records import (
    SUMMARY_FILE,
    Manifest,
    Platform,
    RunSummary,
    StageRow,
    differences_text,
    distinct_platforms,
    platform_differences,
    platform_warning,
)
from recipe_engine.store.store import COMPLETE, ENGINE_MARKER, KEY_LENGTH, is_engine_folder
from recipe_engine.tables import text_table

USAGE = f"""\
usage: recipe-engine runs [ACTION] [output_root=DIR] [--dry-run]

actions
  list (default)        runs (recipe, time, stages with status, key, metrics) and store entries
                        (key, stage, recipe, complete/partial, size, age, eval, platform: made
                        here or on another platform, used by which runs); a warning when the
                        store holds results of several platforms
  rm RUN_DIR            remove a run, sweep job or whole sweep folder (as given, or relative to
                        output_root); store entries are never removed by `rm`
{JOBS_USAGE}
  gc                    remove store entries no remaining run references (nor an ancestor or
                        merged base of one), and .partial/.stale folders whose lock no running
                        job holds, and .tmp folders older than an hour

--dry-run (rm, gc) says what would go without deleting. Nothing outside output_root is touched.
Run gc while nothing is training: a running job's cached parents are not yet in a summary.
"""
ACTIONS = ("list", "rm", "gc", "jobs")
# A folder written aside (`.<name>.<pid>.tmp`) by a live process is left alone this long.
TMP_GRACE_S = 3600
RUN_AREAS = ("runs", "sweeps")
DRY_RUN = "--dry-run"
# Statuses of folders that hold a stage output (kept whenever gc cannot see every reference).
OUTPUT_STATUSES = ("complete", "incomplete", "merged")


@dataclass
class RunInfo:
    """A finished run (or sweep job): its folder, recipe and summary rows."""

    path: Path
    recipe: str
    finished: float  # summary.json's mtime
    stages: list[StageRow]
    unreadable: str | None = None  # why summary.json could not be read (damaged)

    @property
    def entries(self) -> set[str]:
        """Store entry names this run's summary references."""
        return {row.output_path(self.path).name for row in self.stages if row.output}


@dataclass
class EntryInfo:
    """A folder under `store/`: a committed entry or a leftover of an interrupted one."""

    name: str
    path: Path
    # complete | incomplete (committed, marker missing) | partial (a stage being trained or
    # interrupted) | stale (a replaced commit) | merged (an adapter parent merged into its
    # base, which child stages load) | tmp (a folder written aside, renamed when whole)
    status: str
    size: int
    modified: float
    manifest: Manifest | None = None
    used_by: list[Path] = field(default_factory=list)
    engine: bool = True  # the engine wrote it (its marker): the only folders gc may remove
    unreadable: str | None = None  # why a committed entry's manifest could not be read

    @property
    def key(self) -> str:
        """The fingerprint prefix that names the entry's lock file."""
        return self.name.lstrip(".").split(".", 1)[0][:KEY_LENGTH]

    @property
    def parent(self) -> str | None:
        parent = self.manifest.parent_fingerprint if self.manifest else None
        return parent[:KEY_LENGTH] if parent else None


# --- the verb ---------------------------------------------------------------------------------


def find_runs(root: Path) -> list[RunInfo]:
    """Every run folder with a summary.json under runs/ and sweeps/, oldest first."""
    runs = []
    for area in RUN_AREAS:
        base = root / area
        if not base.is_dir():
            continue
        for summary in base.rglob(SUMMARY_FILE):
            finished = summary.stat().st_mtime
            try:  # summaries are written atomically: one that does not read is damaged
                read = RunSummary.load(summary.parent)
            except RecipeError as error:
                runs.append(RunInfo(summary.parent, "?", finished, [], unreadable=str(error)))
                continue
            runs.append(RunInfo(summary.parent, read.recipe, finished, read.stages))
    return sorted(runs, key=lambda r: (r.finished, str(r.path)))


def find_entries(root: Path, runs: Sequence[RunInfo] = ()) -> list[EntryInfo]:
    """Every folder under store/ (but locks/), with status, size and who references it."""
    store = root / "store"
    entries = []
    for path in sorted(store.iterdir()) if store.is_dir() else []:
        if not path.is_dir() or path.is_symlink() or path.name == "locks":
            continue
        manifest, unreadable = None, None
        status, engine = _status(path), is_engine_folder(path)
        if status in ("complete", "incomplete") and engine:  # a folder of the user's: not read
            try:
                manifest = Manifest.load(path)
            except RecipeError as error:
                unreadable = str(error)
        size, modified = _size_and_mtime(path)
        entry = EntryInfo(path.name, path, status, size, modified, manifest)
        entry.engine, entry.unreadable = engine, unreadable
        entry.used_by = [r.path for r in runs if path.name in r.entries]
        entries.append(entry)
    return entries


def _status(path: Path) -> str:
    name = path.name
    if name.startswith("."):
        return "tmp"
    for suffix, status in ((".partial", "partial"), (".stale", "stale")):
        if name.endswith(suffix):
            return status
    if ".merged-" in name:
        return "merged"
    return "complete" if (path / COMPLETE).is_file() else "incomplete"


def needed_entries(runs: Sequence[RunInfo], entries: Sequence[EntryInfo]) -> set[str]:
    """Entries the runs reference, plus their ancestors (a LoRA stage loads its parent)."""
    parents = {e.name: e.parent for e in entries}
    needed: set[str] = set()
    todo = [name for run in runs for name in run.entries]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        if parents.get(name):
            todo.append(parents[name])  # type: ignore[arg-type]
    return needed


def kept_folders(runs: Sequence[RunInfo], entries: Sequence[EntryInfo]) -> set[str]:
    """Store folders gc keeps: needed entries and the merged bases their stages load."""
    needed = needed_entries(runs, entries)
    keys = {name[:KEY_LENGTH] for name in needed}
    bases = {_base_folder(e) for e in entries if e.name in needed}
    merged = {
        e.name for e in entries if e.status == "merged" and (e.key in keys or e.name in bases)
    }
    return needed | merged


def _base_folder(entry: EntryInfo) -> str | None:
    """The folder name of the merged base a child of an adapter (or of an adapter `init.path`)
    loads: `base_location` is store-relative (`./<key>.merged-<dtype>`) in new manifests and
    absolute in old ones; only the name counts, as the store may have moved since."""
    location = entry.manifest.base_path(entry.path.parent) if entry.manifest else None
    return Path(location).name if location else None


def _size_and_mtime(path: Path) -> tuple[int, float]:
    size, newest = 0, path.stat().st_mtime
    for item in path.rglob("*"):
        try:
            stat = item.lstat()
        except OSError:
            continue  # removed while we walked (a job finishing)
        size += stat.st_size if item.is_file() and not item.is_symlink() else 0
        newest = max(newest, stat.st_mtime)
    return size, newest


# --- listing ----------------------------------------------------------------------------------


# Whether an entry was made on this machine's platform: `here` measures it per device (None
# where the machine has no such device); the store layer cannot (measuring imports torch).
PlatformHere = Callable[[str], Platform | None]


def render_listing(root: Path, *, here: PlatformHere) -> str:
    runs = find_runs(root)
    entries = find_entries(root, runs)
    lines = [f"output root: {root}", "", f"runs ({len(runs)}):"]
    if not runs:
        lines.append("  (none)")
    for run in runs:
        lines.append(
            f"  {_rel(run.path, root)}  recipe {run.recipe}  finished {_clock(run.finished)}"
        )
        if run.unreadable:
            lines.append(f"    {run.unreadable}")
        for s in run.stages:
            lines.append(
                f"    {s.stage:<10} {s.status:<8} {s.key}  "
                f"steps {s.steps}  loss {s.loss}  eval {s.eval}"
            )
    total = sum(e.size for e in entries)
    count = f"{len(entries)} folder" + ("" if len(entries) == 1 else "s")
    lines += ["", f"store ({count}, {size_text(total)}):"]
    if not entries:
        lines.append("  (none)")
        return "\n".join(lines)
    lines += _store_table(entries, root, here)
    lines += _platform_lines(entries, here)
    kept = kept_folders(runs, entries)
    unused = [e for e in entries if e.name not in kept]
    if unused:
        size = size_text(sum(e.size for e in unused))
        lines.append(
            f"\n{len(unused)} store folder(s) no run references ({size}): "
            "`python -m recipe_engine runs gc` frees them."
        )
    return "\n".join(lines)


def _store_table(entries: Sequence[EntryInfo], root: Path, here: PlatformHere) -> list[str]:
    headers = ["key", "stage", "recipe", "status", "size", "age", "eval", "platform", "used by"]
    rows = [
        [
            e.name,
            e.manifest.stage if e.manifest else "-",
            e.manifest.recipe if e.manifest else "-",
            e.status,
            size_text(e.size),
            _age(e.modified),
            e.manifest.metrics.eval_text() if e.manifest else "-",
            _platform_mark(e, here),
            _used_by(e.used_by, root),
        ]
        for e in entries
    ]
    return [f"  {line}".rstrip() for line in text_table(rows, header=headers)]


def _platform_of(entry: EntryInfo) -> Platform | None:
    return entry.manifest.platform if entry.manifest else None


def _platform_mark(entry: EntryInfo, here: PlatformHere) -> str:
    """ "here", "other" (made on another platform than this machine's) or "-" (unrecorded)."""
    recorded = _platform_of(entry)
    if recorded is None:
        return "-"
    return "here" if here(recorded.device) == recorded else "other"


def _platform_lines(entries: Sequence[EntryInfo], here: PlatformHere) -> list[str]:
    """A warning when the entries came from several platforms, and how those marked `other`
    differ from this machine (training their key here may give other weights)."""
    warning = platform_warning("the store's entries", [_platform_of(e) for e in entries])
    others = distinct_platforms(
        _platform_of(e) for e in entries if _platform_mark(e, here) == "other"
    )
    lines = [warning] if warning else []
    for device in dict.fromkeys(platform.device for platform in others):
        mine = here(device)
        if mine is None:
            how = f"this machine has no {device} device"
        else:
            theirs = [platform for platform in others if platform.device == device]
            how = differences_text(platform_differences([*theirs, mine]))
        lines.append(f"platform `other` (made elsewhere) vs this machine: {how}")
    return ["", *lines] if lines else []


def _used_by(paths: Sequence[Path], root: Path) -> str:
    names = [_rel(p, root) for p in paths]
    if len(names) > 2:
        return f"{', '.join(names[:2])} +{len(names) - 2}"
    return ", ".join(names) or "-"


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _clock(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


def _age(stamp: float) -> str:
    seconds = max(0.0, time.time() - stamp)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def size_text(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


# --- removing ---------------------------------------------------------------------------------


def resolve_run_dir(root: Path, given: str) -> Path:
    """The run or sweep folder `given` names (as given, or relative to output_root), checked to
    lie strictly inside `<output_root>/runs` or `<output_root>/sweeps`."""
    candidates = [Path(given).expanduser()]
    if not candidates[0].is_absolute():
        candidates.append(root / given)
    path = next((c for c in candidates if c.exists() or c.is_symlink()), None)
    if path is None:
        raise RecipeError(
            f"No run folder `{given}` (looked in the current folder and in {root}). "
            "`python -m recipe_engine runs` lists the runs."
        )
    if path.is_symlink():
        raise RecipeError(f"`{given}` is a symbolic link; pass the run folder itself.")
    path = path.resolve()
    areas = [root / a for a in RUN_AREAS]
    if not any(path.is_relative_to(a) and path != a for a in areas):
        raise RecipeError(
            f"`{given}` ({path}) is not inside {areas[0]} or {areas[1]}; `runs rm` only removes "
            "run folders (store entries go with `runs gc`)."
        )
    depth = max(len(path.relative_to(a).parts) for a in areas if path.is_relative_to(a))
    if not path.is_dir() or not _is_run_folder(path, depth):
        raise RecipeError(
            f"`{given}` is not a run folder (no summary.json, .hydra/ or sweep jobs in it)."
        )
    return path


def _is_run_folder(path: Path, depth: int) -> bool:
    """A run, a sweep job or a whole sweep; not a recipe's folder of runs (depth 1)."""
    # The engine's marker (runs since it existed) or the files only the engine and Hydra write.
    markers = (ENGINE_MARKER, SUMMARY_FILE, ".hydra", "jobs.jsonl", "sweep.md")
    if any((path / m).exists() for m in markers):
        return True
    # A sweep whose jobs never finished has only job folders (`<sweep>/0/.hydra`).
    children = [c for c in path.iterdir() if c.is_dir()]
    return depth >= 2 and any((c / m).exists() for c in children for m in markers)


def remove_run(root: Path, given: str, *, dry_run: bool = False) -> str:
    """Delete one run folder (never a store entry); say what it freed and what gc could."""
    path = resolve_run_dir(root, given)
    size, _ = _size_and_mtime(path)
    verb = "would remove" if dry_run else "removed"
    if not dry_run:
        shutil.rmtree(path)
        # Tidy the now empty recipe folder, but never the runs/ or sweeps/ area itself.
        parent = path.parent
        areas = {root / a for a in RUN_AREAS}
        while parent not in areas and parent.is_relative_to(root) and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    lines = [f"{verb} {path} ({size_text(size)}); store entries are kept."]
    runs = [r for r in find_runs(root) if not r.path.is_relative_to(path)]
    entries = find_entries(root, runs)
    kept = kept_folders(runs, entries)
    unused = [e for e in entries if e.name not in kept]
    if unused:
        lines.append(
            f"{len(unused)} store folder(s) ({size_text(sum(e.size for e in unused))}) are now "
            "referenced by no run: `python -m recipe_engine runs gc` frees them."
        )
    return "\n".join(lines)
