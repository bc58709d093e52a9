"""`report_to=[mlflow]` and `export` against a real MLflow tracking server on loopback (SQLite
backend), read back through MLflow's client."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest
from engine_cli import engine, free_port, start_group, stop_group

SHORT_R3 = (
    "recipe=r3-two-stage",
    "output_root=out",
    "data.max_samples=16",
    "eval.max_samples=4",
    "eval.compare=false",
    "stage.vision.train.max_steps=2",
    "stage.llm.train.max_steps=2",
    "stage.vision.train.logging_steps=1",
    "stage.llm.train.logging_steps=1",
    "stage.vision.train.report_to=[mlflow]",
    "stage.llm.train.report_to=[mlflow]",
)


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` on a free loopback port, stopped (it and the workers it starts,
    its own process group) when the module's tests are done. Tracking and the model registry
    only, as the engine uses it: MLflow's job runner (eight Huey consumer processes for its
    GenAI jobs, measured at 34 CPU s in one run of the suite here) is left off, as
    `MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false` leaves it on a server of that use."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [
        *(sys.executable, "-m", "mlflow", "server"),
        *("--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"),
        *("--artifacts-destination", str(folder / "artifacts")),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    server = start_group(
        command, cwd=folder, log=folder / "server.log", MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(uri, server, folder / "server.log")
        yield uri
    finally:
        stop_group(server, grace=20)


def wait_until_healthy(uri: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 240  # a loaded machine takes a minute to start it
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"mlflow server did not answer in time:\n{log.read_text()[-3000:]}")


@dataclass(frozen=True)
class Tracked:
    uri: str
    work: Path
    env: dict[str, str]
    run_dir: Path


@pytest.fixture(scope="module")
def tracked_run(tracking_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Tracked:
    """One short r3 run reporting to the server (shared by the tests below)."""
    work = tmp_path_factory.mktemp("work")
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": tracking_uri,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",  # a dead server fails fast, not in minutes
    }
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    env.pop("MLFLOW_RUN_ID", None)
    done = engine(*SHORT_R3, cwd=work, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = (work / "out" / "runs" / "r3-two-stage").iterdir()
    return Tracked(tracking_uri, work, env, run_dir)


def recipe_runs(client, experiment_id: str) -> list:
    runs = client.search_runs([experiment_id], order_by=["attributes.start_time ASC"])
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def children(client, experiment_id: str, parent_id: str) -> dict[str, object]:
    runs = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return {run.data.tags["recipe_engine.stage"]: run for run in runs}


def test_a_run_is_a_parent_with_a_child_per_stage(tracked_run: Tracked) -> None:
    client = mlflow.MlflowClient(tracked_run.uri)
    experiment = client.get_experiment_by_name("r3-two-stage")
    [parent] = [
        run
        for run in recipe_runs(client, experiment.experiment_id)
        if run.data.tags["recipe_engine.run_dir"] == str(tracked_run.run_dir)
    ]
    assert parent.info.status == "FINISHED"
    plots = [f.path for f in client.list_artifacts(parent.info.run_id, "plots")]
    assert "plots/loss.png" in plots

    stages = children(client, experiment.experiment_id, parent.info.run_id)
    assert sorted(stages) == ["llm", "vision"]
    # Every run is the engine's (a recipe run or a stage's): the held-out evaluation after
    # training opened no run of its own.
    every = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert not [
        r.info.run_name
        for r in every
        if not any(tag.startswith("recipe_engine.") for tag in r.data.tags)
    ], "a run without the engine's tags"
    vision, llm = stages["vision"], stages["llm"]
    for run in (vision, llm):
        assert run.info.status == "FINISHED"
        assert run.data.tags["recipe_engine.status"] == "trained"
        assert len(run.data.tags["recipe_engine.stage_key"]) == 64
        cards = [f.path for f in client.list_artifacts(run.info.run_id, "model_card")]
        assert cards == ["model_card/README.md"]
        assert "loss" in run.data.metrics  # the Trainer's, through transformers' callback
        assert "stage/eval_loss" in run.data.metrics  # the engine's own evaluation
        assert run.data.metrics["stage/steps"] == 2
        assert run.data.params["max_steps"] == "2"  # the callback's TrainingArguments
    # The plan as params: what each stage freezes, trains and adapts.
    assert vision.data.params["plan.lora"] == "-" and "vision" in vision.data.params["plan.trained"]
    assert llm.data.params["plan.lora"] != "-" and llm.data.params["plan.lora.r"]
    assert llm.data.params["plan.quantization"] in ("-", "4bit", "8bit")
    assert llm.data.params["plan.placement.mode"]
    vision_key = vision.data.tags["recipe_engine.stage_key"]
    assert llm.data.tags["recipe_engine.parent_key"] == vision_key
    lineage = llm.data.tags["recipe_engine.lineage"]
    assert lineage.startswith(f"vision@{vision_key[:12]} > llm@"), lineage


def test_a_cached_rerun_tags_its_stages_reused_by_the_runs_that_trained_them(
    tracked_run: Tracked,
) -> None:
    again = engine(*SHORT_R3, cwd=tracked_run.work, env=tracked_run.env)
    assert again.returncode == 0, again.stderr[-3000:]
    client = mlflow.MlflowClient(tracked_run.uri)
    experiment = client.get_experiment_by_name("r3-two-stage").experiment_id
    first, second = recipe_runs(client, experiment)[:2]
    trained = children(client, experiment, first.info.run_id)
    reused = children(client, experiment, second.info.run_id)
    for name, run in reused.items():
        assert run.data.tags["recipe_engine.reused"] == "true"
        assert run.data.tags["recipe_engine.trained_by_run"] == trained[name].info.run_id
        assert not run.data.metrics  # they belong to the run that trained the stage


def test_export_registers_a_model_version_tagged_with_its_stage(tracked_run: Tracked) -> None:
    to = tracked_run.work / "exported"
    done = engine("export", str(tracked_run.run_dir), f"to={to}", cwd=tracked_run.work,
                  env=tracked_run.env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "as model `r3-two-stage-llm` version 1" in done.stdout
    client = mlflow.MlflowClient(tracked_run.uri)
    [version] = client.search_model_versions("name = 'r3-two-stage-llm'")
    experiment = client.get_experiment_by_name("r3-two-stage").experiment_id
    parent = recipe_runs(client, experiment)[0]
    llm = children(client, experiment, parent.info.run_id)["llm"]
    assert version.run_id == llm.info.run_id  # the run that trained it: its params, metrics
    assert version.tags["recipe_engine.stage_key"] == llm.data.tags["recipe_engine.stage_key"]
    assert version.tags["recipe_engine.lineage"] == llm.data.tags["recipe_engine.lineage"]
    assert version.tags["recipe_engine.form"] == "merged"
    exported = [f.path for f in client.list_artifacts(llm.info.run_id, "export")]
    assert "export/config.json" in exported and "export/README.md" in exported


def test_a_tracking_server_that_does_not_answer_is_one_message_before_training(tmp_path):
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    }
    done = engine(
        "recipe=text-lora",
        "output_root=out",
        "data.max_samples=16",
        "stage.llm.train.report_to=[mlflow]",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "`report_to` names mlflow, but MLflow at http://127.0.0.1:" in message
    assert not list((tmp_path / "out").glob("store/*/COMPLETE"))  # nothing trained
