"""Test-wide settings: the suite is offline by construction (no hub is reachable here)."""

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


def pytest_configure(config) -> None:
    # The install tests (tests/test_wheel.py) are marked, so `pytest -m install` runs only them
    # and `pytest -m "not install"` skips them for a quick loop.
    config.addinivalue_line(
        "markers", "install: installs the package as a user would (wheel, read-only copy)"
    )


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Each test leaves logging as it found it (tests/logging_state.py says why)."""
    with logging_as_it_was():
        yield
