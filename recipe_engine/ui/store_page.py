"""The store page: every folder under `store/` with its stage, status, size and the runs that
use it, and what `runs gc` would free (the same rule `runs gc` applies: `store.gc`), read only:
nothing is locked or removed here."""

from __future__ import annotations

from dataclasses import dataclass

from recipe_engine.store.gc import (
    EntryInfo,
    find_entries,
    find_runs,
    kept_folders,
    size_text,
)
from recipe_engine.ui.paths import OutputFolder


@dataclass(frozen=True)
class EntryRow:
    name: str
    stage: str
    recipe: str
    status: str
    size: str
    eval: str
    used_by: list[str]
    gc: str  # "would free" (no run needs it), "kept", or why a partial entry is kept


@dataclass(frozen=True)
class StorePage:
    entries: list[EntryRow]
    total: str
    freed: str  # what `runs gc` would free, in bytes as text
    freed_count: int


def store_page(folder: OutputFolder) -> StorePage:
    runs = find_runs(folder.root)
    entries = find_entries(folder.root, runs)
    kept = kept_folders(runs, entries)
    # gc leaves a folder the engine did not write, and one a job may be writing (a partial
    # entry's lock, tried only by gc itself): marked here as in progress, not as freed.
    freed = [e for e in entries if e.name not in kept and e.engine and e.status != "partial"]
    rows = [_row(folder, e, e in freed) for e in entries]
    return StorePage(
        rows,
        size_text(sum(e.size for e in entries)),
        size_text(sum(e.size for e in freed)),
        len(freed),
    )


def _row(folder: OutputFolder, entry: EntryInfo, freed: bool) -> EntryRow:
    manifest, partial = entry.manifest, entry.status == "partial"
    return EntryRow(
        entry.name,
        manifest.stage if manifest else "-",
        manifest.recipe if manifest else "-",
        entry.status if entry.engine else f"{entry.status} (not the engine's)",
        size_text(entry.size),
        manifest.metrics.eval_text() if manifest else "-",
        [folder.relative(path) for path in entry.used_by],
        "would free" if freed else "kept: training or interrupted" if partial else "kept",
    )
