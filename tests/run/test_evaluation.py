"""`run.evaluation`: the engine's one definition of a correct answer, and its looser score."""

from __future__ import annotations

import pytest

from recipe_engine.run.evaluation import task_metrics
from recipe_engine.store.scores import TaskMetrics


def test_task_metrics():
    assert task_metrics(
        ["red circle ", "a Red Square!", "x"], ["red circle", "red square", "y"]
    ) == TaskMetrics(
        exact_match=pytest.approx(1 / 3),
        contains=pytest.approx(2 / 3),
    )
