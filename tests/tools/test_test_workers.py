"""`make test`'s worker count: a worker per core, as many as the memory holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.test_workers import RESERVED_GIB, WORKER_GIB, usable_cores, workers

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_per_core_where_the_memory_holds_them():
    assert workers(2, 24.0) == 2
    assert workers(16, 128.0) == 16


def test_the_memory_bounds_the_workers_and_one_always_runs():
    assert workers(16, 24.0) == int((24.0 - RESERVED_GIB) // WORKER_GIB) < 16
    assert workers(8, 4.0) == 1


def test_the_command_prints_the_count_for_this_machine():
    done = subprocess.run([sys.executable, "-m", "tools.test_workers"], cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert 1 <= int(done.stdout) <= usable_cores()
