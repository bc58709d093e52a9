"""How many pytest workers `make test` runs here: one per core, as many as the memory holds.

A worker holds torch, transformers and TRL, and its tests start engine processes of their own
(a DDP test two): its peak, measured over the whole suite on a 2-core machine
(docs/development.md), is `WORKER_GIB`. `RESERVED_GIB` is left to the system and the page
cache. Prints the count, for `pytest -n`.
"""

from __future__ import annotations

import os

from recipe_engine.resolve.cpu import memory_gib

WORKER_GIB = 4.0
RESERVED_GIB = 2.0


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def workers(cores: int, memory: float) -> int:
    """One per core, no more than the memory holds, at least one."""
    return max(1, min(cores, int((memory - RESERVED_GIB) // WORKER_GIB)))


def main() -> None:
    print(workers(usable_cores(), memory_gib()))


if __name__ == "__main__":
    main()
