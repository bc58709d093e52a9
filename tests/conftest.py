"""Test-wide settings: the suite is offline by construction (no hub is reachable here)."""

import gc
import os
import signal
from collections.abc import Iterator

import pytest
from logging_state import logging_as_it_was
from suite_durations import recorded_durations, write_durations

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `make test` runs two workers on two cores, each torch process with its two threads: OpenMP
# threads that spin while they wait would take the cores from the other worker (measured: a
# SmolLM2 QLoRA test 534 s instead of 72 s). Waiting passively changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Under `make test`'s workers, each torch process takes its share of the cores rather than all
# of them (one thread where there is a worker per core): the workers' threads no longer contend
# for the same cores (measured: two r2 + r3 runs side by side, wall 0.78x). Every assertion on
# threads reads torch's own count.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
# Tests stop runs as a terminal's Ctrl-C does (SIGINT). A suite started in the background of a
# script (`make test &`) inherits SIGINT ignored, and so would every command it starts: Python
# then raises no KeyboardInterrupt and those runs would never stop. The handler restored here
# is Python's own, and a command started from here begins with SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _markers(config) -> None:
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


@pytest.fixture(scope="module")
def judge_kept_between_runs() -> Iterator[None]:
    """For a file of `main()` runs in pytest's own process: the libraries' judge
    (`run.preflight`) kept from one run's plan to the next, as a command that plans several
    keeps it, where each `run` stops it before training and the next starts another, paying
    the stack's imports again (measured, the product matrix with no verdict cached: 272 s,
    against 78 s with every verdict cached). Each verdict is still judged in a clean child of
    its own; the judge ends with the file."""
    from recipe_engine.cli import run
    from recipe_engine.run import preflight

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "stop_judge", lambda: None)
        yield
    preflight.stop_judge()


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Each test leaves logging as it found it (tests/logging_state.py says why)."""
    with logging_as_it_was():
        yield


# Each test file's recorded seconds (tests/suite_durations.py), written by `make test-durations`
# (`--record-durations`). `make test` hands whole files to its workers in collection order
# (--dist loadfile --no-loadscope-reorder), so the longest start first and the short ones fill
# in around them: no worker runs one long file alone at the end. A file not in the record (new
# since) starts first: its length is unknown. Only the order changes, never a test.


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="write each test file's seconds to tests/durations.json (make test-durations)",
    )


def pytest_collection_modifyitems(config, items) -> None:
    seconds = recorded_durations()
    root = config.rootpath

    def position(item) -> float:
        return -seconds.get(item.path.relative_to(root).as_posix(), float("inf"))

    items.sort(key=position)  # stable: within a file, and among equals, the collected order


class DurationRecorder:
    """Sums each file's test phases as the controller receives them (from every worker)."""

    def __init__(self) -> None:
        self.files: dict[str, float] = {}
        self.failed: set[str] = set()

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::")[0]
        self.files[path] = self.files.get(path, 0.0) + report.duration
        if report.failed:
            self.failed.add(path)

    def pytest_sessionfinish(self, session) -> None:
        """The files this run measured replace their record, but a file with a failed test
        (its time is not its passing time); files gone from tests/ leave it."""
        root = session.config.rootpath
        measured = {p: t for p, t in self.files.items() if p not in self.failed}
        kept = {p: t for p, t in recorded_durations().items() if (root / p).is_file()}
        files = {**kept, **measured}
        write_durations(files)


def pytest_configure(config) -> None:
    _markers(config)
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(), "duration-recorder")
