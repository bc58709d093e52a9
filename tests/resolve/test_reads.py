"""Rows are read once per process by their content key (`resolve.reads`), and a plan carries
none of them: it pickles as data (a sweep's worker reads the rows itself)."""

from __future__ import annotations

import dataclasses
import pickle
from collections import OrderedDict

import pytest
from plans import plan

from recipe_engine.resolve import reads


def test_rows_are_read_once_per_key_and_only_the_last_few_are_kept(monkeypatch):
    monkeypatch.setattr(reads, "_read", OrderedDict())
    calls: list[str] = []

    def reader(key: str):
        return lambda: calls.append(key) or f"rows of {key}"

    assert reads.read_once("a", reader("a")) == reads.read_once("a", reader("a")) == "rows of a"
    assert calls == ["a"]
    for key in "bcde":  # "a" is now the oldest of KEPT + 1
        reads.read_once(key, reader(key))
    assert list(reads._read) == ["b", "c", "d", "e"]
    reads.read_once("a", reader("a"))
    assert calls == ["a", "b", "c", "d", "e", "a"]


def test_a_plan_is_immutable_data_its_rows_named_by_content_not_carried():
    planned = plan("recipe=r3-two-stage")
    rows = planned.stages["llm"].data
    again = pickle.loads(pickle.dumps(planned)).stages["llm"].data
    assert again == rows and again.read_key == rows.read_key
    for part in (planned, planned.stages["llm"], rows):
        with pytest.raises(dataclasses.FrozenInstanceError):
            part.notes = []  # type: ignore[misc]
