"""Test-wide settings: the suite is offline by construction (no hub is reachable here)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one thread each (and in the engine processes a
    # test starts), since two workers spinning two OpenMP threads each on two cores slow every
    # training step tens of times over.
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_configure(config) -> None:
    # The install tests (tests/test_wheel.py) are marked, so `pytest -m install` runs only them
    # and `pytest -m "not install"` skips them for a quick loop.
    config.addinivalue_line(
        "markers", "install: installs the package as a user would (wheel, read-only copy)"
    )
