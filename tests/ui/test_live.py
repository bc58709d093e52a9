"""A run that has not finished, read from what it writes while it goes: its log's stage lines,
the store's partial entry (metrics.jsonl, the trainer's checkpoints), and how it ended when it
did not finish (a traceback, or nothing written for a while). The records are written here in
the engine's own formats; tests/browser/ watches a real run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from recipe_engine.launchers.records import SubmittedJob, save_jobs
from recipe_engine.store.store import COMPLETE, ENGINE_MARKER
from recipe_engine.ui import live
from recipe_engine.ui.paths import OutputFolder
from recipe_engine.ui.runs import read_run

KEY_V, KEY_L, OLD = "a" * 20, "b" * 20, "c" * 20


def log_line(stamp: float, text: str) -> str:
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    return f"[{clock},123][recipe_engine][INFO] - {text}\n"


def partial(store: Path, key: str, made: float) -> Path:
    folder = store / f"{key}.partial"
    folder.mkdir(parents=True)
    (folder / ENGINE_MARKER).write_text("written by recipe-engine\n")
    os.utime(folder / ENGINE_MARKER, (made, made))
    return folder


def metrics(folder: Path, steps: list[int], start: float, per_step: float = 2.0) -> None:
    lines = [
        {"step": s, "epoch": s / 10, "time": start + s * per_step, "loss": 1.0 / s} for s in steps
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def going_run(root: Path, started: float) -> Path:
    """A two-stage run: vision committed, llm training in a partial entry."""
    run_dir = root / "runs" / "r3-two-stage" / "2026-11-26_01-50-45"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ENGINE_MARKER).write_text("written by recipe-engine\n")
    stages = {
        "vision": {"init": {"from_stage": None}, "train": {"num_train_epochs": 6}},
        "llm": {"init": {"from_stage": "vision"}, "train": {"num_train_epochs": 4}},
    }
    config = {"recipe": {"name": "r3-two-stage"}, "stage": stages}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    store = root / "store"
    partial(store, OLD, started - 3600)  # another run's, interrupted an hour ago
    partial(store, KEY_L, started + 30)
    (run_dir / "app.log").write_text(
        log_line(started + 1, "stage vision: loading /cache/models/tiny")
        + log_line(started + 20, f"stage vision: committed {store / KEY_V}")
        + log_line(started + 31, f"stage llm: loading {store / KEY_V}")
    )
    metrics(store / f"{KEY_L}.partial", [10, 20, 30], start=started + 32)
    return run_dir


def test_the_log_names_each_stage_s_entry_and_end(tmp_path):
    lines = [
        log_line(100, "stage a: loading x"),
        log_line(110, "stage a: cached at /o/store/" + KEY_V),
        log_line(120, "stage b: loading /o/store/" + KEY_V),
        log_line(
            121, f"stage b: resuming from /o/store/{KEY_L}.partial/checkpoints/checkpoint-100"
        ),
    ]
    run_dir = tmp_path
    (run_dir / "app.log").write_text("".join(lines) + "unrelated line\n")
    found = live.read_log(run_dir).stages
    assert (found["a"].entry, found["a"].ended) == (KEY_V, "cached")
    assert (found["b"].entry, found["b"].ended) == (KEY_L, None)
    assert round(found["b"].since or 0) == 110 and round(found["b"].started or 0) == 120


def test_the_training_stage_is_the_partial_entry_made_since_the_event_before_it(tmp_path):
    started = time.time() - 60
    run_dir = going_run(tmp_path, started)
    run = read_run(OutputFolder.at(tmp_path), run_dir, {})
    assert run.state == "running"
    vision, llm = run.stages
    assert (vision.state, vision.entry) == ("committed", KEY_V)
    assert (llm.state, llm.entry, llm.parent) == ("training", KEY_L, "vision")
    assert llm.progress is not None
    # 30 steps logged at epoch 3.0 of 4: 40 steps in all, 2 s a step, 10 left
    assert (llm.progress.step, llm.progress.total) == (30, 40)
    assert llm.progress.seconds_left == 20.0
    assert llm.detail == "step 30 / 40, loss 0.033, 20 s left"


def test_the_checkpoint_s_planned_steps_win_over_the_epoch_estimate(tmp_path):
    folder = partial(tmp_path, KEY_L, time.time())
    metrics(folder, [10, 20], start=0)
    state = folder / "checkpoints" / "checkpoint-20" / "trainer_state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"max_steps": 333, "global_step": 20}))
    progress = live.progress(folder, {"num_train_epochs": 4})
    assert progress is not None and progress.total == 333


def test_a_run_that_wrote_nothing_for_a_while_stopped_and_its_stage_failed(tmp_path):
    started = time.time() - 3600
    run_dir = going_run(tmp_path, started)
    quiet = time.time() - live.QUIET_S - 60
    for path in [run_dir / "app.log", tmp_path / "store" / f"{KEY_L}.partial" / "metrics.jsonl"]:
        os.utime(path, (quiet, quiet))
    run = read_run(OutputFolder.at(tmp_path), run_dir, {})
    assert run.state == "stopped"
    assert [s.state for s in run.stages] == ["committed", "failed"]
    assert "no summary.json" in run.stages[1].detail


def test_a_run_with_a_traceback_failed_with_its_last_line(tmp_path):
    run_dir = going_run(tmp_path, time.time() - 60)
    (run_dir / "traceback.txt").write_text(
        "Traceback (most recent call last):\n  File x\nRuntimeError: CUDA error: out of memory\n"
    )
    run = read_run(OutputFolder.at(tmp_path), run_dir, {})
    assert (run.state, run.reason) == ("failed", "RuntimeError: CUDA error: out of memory")
    assert run.stages[1].state == "failed"
    assert run.stages[1].detail == f"{run.reason} (at step 30)"  # where it stopped


def test_a_cluster_run_follows_its_jobs_keys_in_the_shared_store(tmp_path):
    """`launcher=slurm`: jobs.json names each stage's key; the jobs write the shared store."""
    run_dir = going_run(tmp_path, time.time() - 60)
    (run_dir / "app.log").unlink()  # the submitting process logs no stage
    jobs = [
        SubmittedJob("vision", "101", KEY_V + "f" * 44, (), 1, "v.out", "resubmit"),
        SubmittedJob("llm", "102", KEY_L + "f" * 44, ("vision",), 1, "l.out", "resubmit"),
    ]
    save_jobs(run_dir, jobs)
    committed = tmp_path / "store" / KEY_V
    committed.mkdir()
    (committed / COMPLETE).write_text(json.dumps({"fingerprint": KEY_V}))
    run = read_run(OutputFolder.at(tmp_path), run_dir, {})
    assert run.state == "submitted"
    vision, llm = run.stages
    assert (vision.state, vision.entry, vision.detail) == ("committed", KEY_V, "SLURM job 101")
    assert (llm.state, llm.entry) == ("training", KEY_L)
    assert llm.progress is not None and llm.progress.step == 30


def test_a_ray_run_whose_stage_failed_says_which_and_why_and_what_it_left_unrun(tmp_path):
    """`launcher=ray`: the driver records each task's state beside jobs.json; the view reads
    them (nothing is asked of the cluster)."""
    from recipe_engine.launchers.kinds import JobPhase, JobState
    from recipe_engine.launchers.ray.driver import save_states

    run_dir = going_run(tmp_path, time.time() - 60)
    (run_dir / "app.log").unlink()
    jobs = [
        SubmittedJob("vision", "vision-1", KEY_V + "f" * 44, (), 1, "v.log", "rerun", "ray"),
        SubmittedJob("llm", "llm-1", KEY_L + "f" * 44, ("vision",), 1, "l.log", "rerun", "ray"),
    ]
    save_jobs(run_dir, jobs)
    why = "on 10.0.0.2 (6d3f0a1b): killed by SIGKILL; its last output: step 30"
    save_states(
        run_dir,
        [
            JobState("vision-1", JobPhase.FAILED, "FAILED", "-9", "-", (), "00:00:10", why),
            JobState(
                "llm-1",
                JobPhase.CANCELLED,
                "NOT_RUN",
                "-",
                "-",
                (),
                "-",
                "its parent stage vision did not commit",
            ),  # fmt: skip
        ],
    )
    run = read_run(OutputFolder.at(tmp_path), run_dir, {})
    assert (run.state, run.reason) == ("failed", f"stage vision: FAILED: {why}")
    vision, llm = run.stages
    assert (vision.state, vision.detail) == ("failed", f"FAILED: {why}")
    assert (llm.state, llm.detail) == ("planned", "not run: its parent stage vision did not commit")
