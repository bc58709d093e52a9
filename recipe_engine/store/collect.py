"""`runs gc`: free the store folders no run needs, never one the engine did not write or one a
writer may still use (its per-key lock is tried without waiting and held while it goes)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import Timeout

from recipe_engine.files import file_lock
from recipe_engine.store.gc import (
    OUTPUT_STATUSES,
    TMP_GRACE_S,
    EntryInfo,
    find_entries,
    find_runs,
    kept_folders,
    size_text,
)
from recipe_engine.store.store import ENGINE_MARKER


@contextmanager
def unlocked(root: Path, key: str) -> Iterator[bool]:
    """Try the store's per-key lock without waiting; yield whether we hold it.

    Held for the whole deletion, so a job that asks for the key afterwards waits and then
    finds it missing (and trains) rather than using a half-deleted folder.
    """
    lock = file_lock(root / "store" / "locks" / f"{key}.lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def collect_garbage(
    root: Path, *, dry_run: bool = False, announce: Callable[[str], None] = print
) -> str:
    """Remove store folders no run needs; `announce` what goes before it goes; report the rest.

    Only folders the engine wrote are candidates. A run summary or a stage manifest that cannot
    be read leaves gc unable to tell what is needed, so every stage output is kept."""
    runs = find_runs(root)
    entries = find_entries(root, runs)
    kept = kept_folders(runs, entries)
    blind = [r.unreadable for r in runs if r.unreadable]
    blind += [e.unreadable for e in entries if e.unreadable]
    store = (root / "store").resolve()
    candidates = [
        e
        for e in entries
        if e.name not in kept
        and e.engine
        and e.path.resolve().parent == store  # never outside the store (defence in depth)
        and not (blind and e.status in OUTPUT_STATUSES)
    ]
    removed, busy = [], []
    for entry in candidates:
        went = _remove_entry(root, entry, dry_run=dry_run, announce=announce)
        (removed if went else busy).append(entry)
    foreign = [e for e in entries if not e.engine]
    held = len([e for e in entries if e.name in kept])
    collected = Collected(removed, busy, foreign, blind, held, len(runs))
    return _gc_report(collected, dry_run=dry_run)


def _remove_entry(
    root: Path, entry: EntryInfo, *, dry_run: bool, announce: Callable[[str], None]
) -> bool:
    """Delete one unneeded store folder unless a writer may still use it; whether it went.
    What goes is announced once its lock is held, so a folder a job holds is never
    announced (a dry run's report lists what would go)."""
    if entry.status == "tmp" and time.time() - entry.modified < TMP_GRACE_S:
        return False  # its writer may still be at work (tmp folders take no lock)
    with unlocked(root, entry.key) as free:
        if free and not dry_run:
            announce(f"  will free {entry.name}  {size_text(entry.size)}  ({_what(entry)})")
            shutil.rmtree(entry.path)
    return free


def _what(entry: EntryInfo) -> str:
    what = f"{entry.manifest.stage} of {entry.manifest.recipe}" if entry.manifest else ""
    return f"{what}, {entry.status}" if what else entry.status


@dataclass(frozen=True)
class Collected:
    """What gc did: freed, kept busy, kept as not the engine's, and why it kept everything."""

    removed: Sequence[EntryInfo]
    busy: Sequence[EntryInfo]
    foreign: Sequence[EntryInfo]
    blind: Sequence[str]  # the unreadable records that made gc keep every stage output
    held: int  # entries some run references
    runs: int


def _gc_report(collected: Collected, *, dry_run: bool) -> str:
    removed, busy, foreign = collected.removed, collected.busy, collected.foreign
    blind, held, runs = collected.blind, collected.held, collected.runs
    verb = "would free" if dry_run else "freed"
    lines = [f"  {verb} {e.name}  {size_text(e.size)}  ({_what(e)})" for e in removed]
    for e in busy:
        why = "being written" if e.status == "tmp" else "a running job holds its lock"
        lines.append(f"  kept {e.name} ({e.status}): {why}")
    for e in foreign:
        lines.append(
            f"  kept {e.name}: not written by recipe-engine (no {ENGINE_MARKER} marker); "
            "gc never removes what it did not write"
        )
    for problem in blind:
        lines.append(
            f"  kept every stage output: {problem} Fix or remove that file (`runs rm RUN_DIR` "
            "for a run folder), then run gc again."
        )
    freed = sum(e.size for e in removed)
    lines.append(
        f"{verb} {size_text(freed)} in {len(removed)} store folder(s); kept {held} referenced "
        f"by {runs} run(s)."
    )
    return "\n".join(lines)
