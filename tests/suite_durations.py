"""The suite's recorded durations: each test file's seconds (setup, call and teardown of its
tests, summed) in tests/durations.json, written by `make test-durations` (tests/conftest.py
records them), read to order `make test`'s files and held to the budget
(tests/test_suite_budget.py)."""

from __future__ import annotations

import json
from pathlib import Path

DURATIONS = Path(__file__).parent / "durations.json"


def recorded_durations() -> dict[str, float]:
    """{test file, as pytest names it: seconds}; {} before the first record."""
    return json.loads(DURATIONS.read_text())["files"] if DURATIONS.is_file() else {}


def write_durations(files: dict[str, float]) -> None:
    """The record, longest first, with its total."""
    ordered = dict(sorted(files.items(), key=lambda item: -item[1]))
    record = {
        "total_s": round(sum(ordered.values()), 1),
        "files": {path: round(seconds, 2) for path, seconds in ordered.items()},
    }
    DURATIONS.write_text(json.dumps(record, indent=1) + "\n")
