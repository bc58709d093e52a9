"""The suite's time is held to a budget: tests/durations.json (written by `make
test-durations`) records each file's seconds, and its total may exceed the budget
docs/development.md states last by at most 10%. A suite that grows past that needs a new
budget line there, saying why; and every test file `make test` runs is in the record, so
`make test` starts the longest first (tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

from suite_durations import DURATIONS, recorded_durations

ROOT = Path(__file__).resolve().parents[1]
DEVELOPMENT = ROOT / "docs" / "development.md"
BUDGET = re.compile(r"^Suite budget: ([\d,]+) s of test time", re.MULTILINE)
GROWTH = 1.10
# Run by `make test-cluster` and `make test-browser`, not `make test`: not in the record.
OTHER_TARGETS = ("tests/cluster/", "tests/browser/")


def budget_s() -> int:
    lines = BUDGET.findall(DEVELOPMENT.read_text())
    assert lines, "docs/development.md states no `Suite budget: N s of test time` line"
    return int(lines[-1].replace(",", ""))


def test_the_recorded_total_is_within_the_budget():
    total = sum(recorded_durations().values())
    assert total <= GROWTH * budget_s(), (
        f"{DURATIONS.name} records {total:.0f} s of test time, over the budget of "
        f"{budget_s()} s in docs/development.md by more than 10%: make the suite faster, or "
        "add a new `Suite budget:` line there saying what the time buys"
    )


def test_every_test_file_is_in_the_record():
    recorded = recorded_durations()
    files = sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if not path.relative_to(ROOT).as_posix().startswith(OTHER_TARGETS)
    )
    missing = [path for path in files if path not in recorded]
    assert not missing, f"not in {DURATIONS.name} (run `make test-durations`): {missing}"
