"""Trackers at run time: a stage trained with `report_to=tensorboard` (offline) leaves its
events in the run folder, where the commit (which deletes the stage's work folder) cannot
reach them; `run_name` defaults to `<recipe>/<stage>`; tracker-only changes reuse the stage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from recipe_engine.config.compose import compose_config
from recipe_engine.run import tracking
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe
from recipe_engine.store.store import Store

STEPS = 3
SHORT = [
    "recipe=text-lora",
    "data.max_samples=24",
    "eval.max_samples=4",
    "eval.compare=false",
    f"++stage.llm.train.max_steps={STEPS}",
    "++stage.llm.train.per_device_train_batch_size=4",
    "++stage.llm.train.logging_steps=1",
    "++stage.llm.train.save_steps=2",  # a checkpoint in the work folder the commit deletes
]


def run(outputs: Path, run_name: str, *extra: str):
    cfg = compose_config([*SHORT, f"output_root={outputs}", *extra])
    run_dir = outputs / "runs" / "text-lora" / run_name
    [result] = run_recipe(plan_from_config(cfg), run_dir)
    return result, run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    outputs = tmp_path_factory.mktemp("outputs")
    result, run_dir = run(outputs, "t1", "++stage.llm.train.report_to=tensorboard")
    return outputs, result, run_dir


def test_tensorboard_events_land_in_the_run_folder_and_outlive_the_commit(trained):
    outputs, result, run_dir = trained
    assert result.status == "trained"
    events = run_dir / "tensorboard" / "llm"
    assert list(events.glob("events.out.tfevents.*"))
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    losses = accumulator.Scalars("train/loss")
    assert [point.step for point in losses] == list(range(1, STEPS + 1))  # logging_steps=1
    assert "eval/loss" in accumulator.Tags()["scalars"]  # the evaluation after the commit too
    work = Store(outputs).work_dir(result.manifest.fingerprint)
    assert not work.exists()  # the commit removed the work folder and its checkpoints
    assert not list((outputs / "store").rglob("events.out.tfevents.*"))


def test_run_name_defaults_to_recipe_and_stage(trained):
    _, _, run_dir = trained
    accumulator = EventAccumulator(str(run_dir / "tensorboard" / "llm"))
    accumulator.Reload()
    [text] = accumulator.Tensors("args/text_summary")  # the TrainingArguments, as logged
    arguments = json.loads(text.tensor_proto.string_val[0].decode())
    assert arguments["run_name"] == "text-lora/llm"
    assert arguments["report_to"] == ["tensorboard"]


def test_tracker_only_changes_reuse_the_trained_stage(trained):
    outputs, first, _ = trained
    result, run_dir = run(
        outputs,
        "t2",
        "++stage.llm.train.report_to=none",
        "++stage.llm.train.run_name=another",
        f"++stage.llm.train.logging_dir={outputs / 'tb'}",
    )
    assert result.status == "cached" and result.output == first.output
    assert not (run_dir / "tensorboard").exists() and not (outputs / "tb").exists()


def test_logging_dir_set_by_the_user_wins(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "r" / "t"
    monkeypatch.delenv(tracking.TENSORBOARD_VARIABLE, raising=False)
    assert tracking.tensorboard_dir(run_dir, "llm", {}) == run_dir / "tensorboard" / "llm"
    monkeypatch.setenv(tracking.TENSORBOARD_VARIABLE, str(tmp_path / "env"))
    assert tracking.tensorboard_dir(run_dir, "llm", {}) == tmp_path / "env"
    chosen = {"logging_dir": str(tmp_path / "mine")}
    assert tracking.tensorboard_dir(run_dir, "llm", chosen) == tmp_path / "mine"


def test_the_variable_is_set_only_while_the_trainer_is_built(monkeypatch, tmp_path):
    monkeypatch.delenv(tracking.TENSORBOARD_VARIABLE, raising=False)
    with tracking.tensorboard_logging_dir(tmp_path):
        assert os.environ[tracking.TENSORBOARD_VARIABLE] == str(tmp_path)
    assert tracking.TENSORBOARD_VARIABLE not in os.environ
    monkeypatch.setenv(tracking.TENSORBOARD_VARIABLE, "the user's")
    with tracking.tensorboard_logging_dir(tmp_path):
        pass
    assert os.environ[tracking.TENSORBOARD_VARIABLE] == "the user's"


def test_a_run_name_set_by_the_user_is_kept():
    assert tracking.with_run_name({}, "r3", "llm")["run_name"] == "r3/llm"
    assert tracking.with_run_name({"run_name": "mine"}, "r3", "llm")["run_name"] == "mine"
