"""`store.scores`: a model's comparison metrics as typed records, written as the metrics file
has always held them (a key only for what was measured, in the same order)."""

from __future__ import annotations

from recipe_engine.report.compare import metrics_table
from recipe_engine.store.scores import (
    Generation,
    JudgedScores,
    ModelMetrics,
    RunLabels,
    TaskMetrics,
    metrics_json,
)
from recipe_engine.trainers.kind import PREFERENCE_ROWS


def test_a_models_record_holds_every_measurement_in_the_files_order():
    judged = JudgedScores(PREFERENCE_ROWS, {"pair_accuracy": 0.5, "win_rate": 1.0}, 2, "pairs")
    metrics = ModelMetrics(
        2, TaskMetrics(0.5, 1.0), None, loss_measured=True, preference=judged,
        labels=RunLabels("50%", None),
    )  # fmt: skip
    record = metrics.to_json()
    assert list(record) == [
        "n", "exact_match", "contains", "eval_loss", "preference",
        "base_precision", "run_accuracy", "run_loss",
    ]  # fmt: skip
    assert record["eval_loss"] is None  # measured, but TRL's loss was not a number
    assert record["preference"] == {
        "pair_accuracy": 0.5, "win_rate": 1.0, "pairs": 2, "judged": "preference",
    }  # fmt: skip
    assert record["base_precision"] == "full" and record["run_accuracy"] == "50%"


def test_what_was_not_measured_has_no_key_and_no_column():
    prompts = ModelMetrics(3)  # a .txt of prompts: no references, no loss
    assert prompts.to_json() == {"n": 3}
    judged_only = ModelMetrics(3, TaskMetrics(0.0, 0.5))  # judged rows: no SFT loss
    not_a_number = ModelMetrics(3, TaskMetrics(0.0, 0.5), None, loss_measured=True)
    header = metrics_table(metrics_json({"base": judged_only})).splitlines()[0]
    assert "contains" in header and "eval_loss" not in header
    table = metrics_table(metrics_json({"base": not_a_number})).splitlines()
    assert "eval_loss" in table[0] and table[-1].split()[-1] == "-"


def test_generation_takes_the_eval_settings_generation_keys():
    settings = {"max_new_tokens": 4, "max_samples": 10, "do_sample": True, "enabled": True}
    generation = Generation.from_settings(settings, seed=3)
    assert generation == Generation(max_new_tokens=4, do_sample=True, seed=3)
    assert generation.settings() == [
        ("max_new_tokens", 4), ("batch_size", 16), ("do_sample", True),
        ("temperature", 1.0), ("top_p", 1.0),
    ]  # fmt: skip
