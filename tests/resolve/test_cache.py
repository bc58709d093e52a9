"""recipe_engine.resolve.cache: records that only save work, never a reason to fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from recipe_engine.resolve import cache


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_record_is_read_once_and_then_served(records: Path) -> None:
    reads: list[int] = []
    read = lambda: reads.append(1) or {"rows": 3}  # noqa: E731
    assert cache.remembered("rows", {"x": 1}, read) == {"rows": 3}
    assert cache.remembered("rows", {"x": 1}, read) == {"rows": 3}
    assert len(reads) == 1


def test_a_damaged_record_is_read_again_and_replaced(records: Path) -> None:
    cache.remembered("rows", {"x": 1}, lambda: {"rows": 3})
    [record] = (records / "rows").glob("*.json")
    record.write_text('{"rows": ')  # cut short outside the engine
    assert cache.remembered("rows", {"x": 1}, lambda: {"rows": 4}) == {"rows": 4}
    assert cache.remembered("rows", {"x": 1}, lambda: {"rows": 5}) == {"rows": 4}


def test_a_cache_that_cannot_be_written_is_not_kept_and_the_read_goes_on(records: Path) -> None:
    (records / "rows").mkdir(parents=True)
    subprocess.run(["chattr", "+i", str(records / "rows")], check=True)  # refuses root too
    try:
        assert cache.remembered("rows", {"x": 1}, lambda: {"rows": 3}) == {"rows": 3}
        assert not list((records / "rows").iterdir())
    finally:
        subprocess.run(["chattr", "-i", str(records / "rows")], check=True)


def test_what_waits_for_the_first_read_runs_once_before_it_and_never_on_hits(
    records: Path,
) -> None:
    cache.remembered("rows", {"x": 1}, lambda: {"rows": 3})
    calls: list[str] = []
    with cache.before_first_read(lambda: calls.append("started")):
        cache.remembered("rows", {"x": 1}, lambda: calls.append("read") or {"rows": 3})
        assert calls == []  # a hit: nothing to overlap, nothing started
        cache.remembered("rows", {"x": 2}, lambda: calls.append("read") or {"rows": 4})
        cache.remembered("rows", {"x": 3}, lambda: calls.append("read") or {"rows": 5})
    assert calls == ["started", "read", "read"]
    cache.remembered("rows", {"x": 4}, lambda: {"rows": 6})  # outside the block: no call
    assert calls == ["started", "read", "read"]
