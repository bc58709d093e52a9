"""Test-wide settings: the suite is offline by construction (no hub is reachable here)."""

import gc
import os
from collections.abc import Iterator

import pytest
from logging_state import logging_as_it_was

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `make test` runs two workers on two cores, each torch process with its two threads: OpenMP
# threads that spin while they wait would take the cores from the other worker (measured: a
# SmolLM2 QLoRA test 534 s instead of 72 s). Waiting passively changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Under `make test`'s workers (one per core), each torch process takes one thread rather than
# one per core: two workers' threads no longer contend for both cores (measured: two r2 + r3
# runs side by side, wall 0.78x). Every assertion on threads reads torch's own count.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= (os.cpu_count() or 1):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config) -> None:
    # The install tests (tests/test_wheel.py) are marked, so `pytest -m install` runs only them
    # and `pytest -m "not install"` skips them for a quick loop.
    config.addinivalue_line(
        "markers", "install: installs the package as a user would (wheel, read-only copy)"
    )


@pytest.fixture(scope="module", autouse=True)
def _earlier_heap_frozen() -> None:
    """Each test file starts with what the worker already holds (torch, transformers, TRL and
    what earlier files left alive, over half a million objects) frozen out of the garbage
    collector: Python's full collections, the engine's own `gc.collect()` after each model it
    scores and the CPU memory tracker's `gc.get_objects` otherwise walk all of it again in
    every in-process run (measured: tests/run/test_seeding.py 15% fewer CPU seconds, the
    product matrix a third). What a file makes is never frozen by it, so what its runs free
    and measure of themselves is as in a fresh process; earlier garbage is freed first."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Each test leaves logging as it found it (tests/logging_state.py says why)."""
    with logging_as_it_was():
        yield


# The files that take longest (minutes each, measured with --durations), longest first. `make
# test` hands whole files to its two workers in collection order (--dist loadfile
# --no-loadscope-reorder), so these start first and the short files fill in around them: no
# worker is left running one long file alone at the end. Only the order changes, never a test.
LONGEST_FIRST = (
    "tests/cli/test_hub.py",
    "tests/run/test_recipe.py",
    "tests/test_tiny.py",
    "tests/cli/test_run_sharded.py",
    "tests/run/test_faults.py",
    "tests/report/test_sweep.py",
    "tests/cli/test_mlflow_server.py",
    "tests/cli/test_compare_recipes.py",
    "tests/cli/test_run_distributed.py",
    "tests/run/test_seeding.py",
    "tests/run/test_seed_failures.py",
    "tests/fuzz/test_fuzz.py",
    "tests/cli/test_product_matrix.py",
    "tests/cli/test_export.py",
    "tests/test_default_recipe.py",
    "tests/cli/test_smollm2.py",
    "tests/cli/test_compare_run.py",
    "tests/cli/test_peer_format_runs.py",
    "tests/run/test_preference_resume.py",
    "tests/ui/test_app.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def position(item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=position)  # stable: within a file, and among the rest, the collected order
