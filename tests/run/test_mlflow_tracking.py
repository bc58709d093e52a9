"""What `report_to=[mlflow]` and `export register=` decide before any server is asked (the
server itself: tests/cli/test_mlflow_server.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from recipe_engine.cli.export import parse_options
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.slurm_submit import StageTask
from recipe_engine.run import mlflow_tracking
from recipe_engine.store.records import StageMetrics


@pytest.mark.parametrize(
    ("report_to", "reports"),
    [("mlflow", True), (["tensorboard", "mlflow"], True), ("tensorboard", False), (None, False)],
)
def test_a_stage_reports_to_mlflow_when_its_report_to_names_it(report_to, reports):
    stage = SimpleNamespace(trainer={"report_to": report_to})
    assert mlflow_tracking.reports_to_mlflow(stage) is reports


def test_stage_metrics_are_the_engines_numbers_under_stage():
    metrics = StageMetrics(steps=2, eval_loss=0.5, preference={"reward_accuracy": 0.75})
    metrics.evaluation_error = "ValueError: x"  # text: never a metric
    logged = mlflow_tracking.stage_metrics(metrics)
    assert logged["stage/steps"] == 2.0 and logged["stage/eval_loss"] == 0.5
    assert logged["stage/preference/reward_accuracy"] == 0.75
    assert "stage/eval_accuracy" not in logged  # not measured: not logged
    assert not any("error" in name or "train_losses" in name for name in logged)


def test_lineage_names_each_stage_with_its_short_key_from_the_root():
    text = mlflow_tracking.lineage_text([("vision", "a" * 64), ("llm", "b" * 64)])
    assert text == f"vision@{'a' * 12} > llm@{'b' * 12}"


def test_a_scheduled_stage_job_nests_under_the_submissions_run():
    task = StageTask(("recipe=r3-two-stage",), "llm", "/runs/x", 1, 1, mlflow_parent="abc")
    assert task.environment()[mlflow_tracking.PARENT_VARIABLE] == "abc"
    alone = StageTask(("recipe=r3-two-stage",), "llm", "/runs/x", 1, 1)
    assert mlflow_tracking.PARENT_VARIABLE not in alone.environment()


def test_export_registers_by_default_when_a_tracking_uri_is_set(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert not parse_options(["RUN"]).register
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert parse_options(["RUN"]).register
    assert not parse_options(["RUN", "register=false"]).register
    named = parse_options(["RUN", "registered_model=mine"])
    assert named.register and named.registered_model == "mine"


def test_a_registered_model_name_without_registering_is_refused(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(RecipeError, match="registered_model="):
        parse_options(["RUN", "registered_model=mine"])
    with pytest.raises(RecipeError, match="use true or false"):
        parse_options(["RUN", "register=maybe"])


def test_registering_without_mlflow_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(RecipeError, match=r"recipe-engine\[mlflow\]"):
        parse_options(["RUN", "register=true"])
