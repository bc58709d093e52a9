"""Test-wide settings: the suite is offline by construction (no hub is reachable here)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config) -> None:
    # The install tests (tests/test_wheel.py) are marked, so `pytest -m install` runs only them
    # and `pytest -m "not install"` skips them for a quick loop.
    config.addinivalue_line(
        "markers", "install: installs the package as a user would (wheel, read-only copy)"
    )
