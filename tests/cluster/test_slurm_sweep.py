"""A Hydra multirun through SLURM (`hydra/launcher=recipe-submitit-slurm`) on the test cluster:
three jobs, the stage they share trained once; a request the partition cannot give is one
message naming the key, before anything is written."""

from __future__ import annotations

import re

import pytest
from conftest import wait_for_jobs
from engine_cli import engine, stored_stages

from recipe_engine.report.sweep import JOBS_FILE, SweepJob, read_jobs

pytestmark = pytest.mark.cluster

SWEEP = [
    "-m",
    "hydra/launcher=recipe-submitit-slurm",
    "recipe=r3-two-stage",
    "device=cpu",
    "data.max_samples=32",
    "eval.enabled=false",
    "stage.vision.train.max_steps=3",
    "stage.llm.train.max_steps=3",
]


def status_of(job: SweepJob, stage: str) -> str:
    return next(s.status for s in job.stages if s.stage == stage)


def test_a_slurm_sweep_trains_the_shared_stage_once_and_lists_every_job(slurm, tmp_path):
    done = engine(
        *SWEEP,
        "stage.llm.train.learning_rate=1e-4,2e-4,3e-4",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=3",
        "hydra.launcher.timeout_min=20",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = (tmp_path / "sweeps" / "r3-two-stage").iterdir()
    jobs = read_jobs(folder / JOBS_FILE)
    assert len(jobs) == 3 and all(j.status == "completed" for j in jobs)
    assert sorted(status_of(j, "vision") for j in jobs) == ["cached", "cached", "trained"]
    assert stored_stages(tmp_path) == ["llm", "llm", "llm", "vision"]
    table = (folder / "sweep.md").read_text()
    assert all(f"learning_rate={lr}" in table for lr in ("0.0001", "0.0002", "0.0003"))
    # Really SLURM's jobs: an array of three, every one COMPLETED in its accounting.
    tasks = [p.name for p in (folder / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name)]
    rows = wait_for_jobs(slurm, tasks, 120)  # the results come back before the steps end
    assert len(rows) == 3 and {r["State"] for r in rows.values()} == {"COMPLETED"}


def test_a_sweep_asking_more_cpus_than_a_node_has_is_one_message(slurm, tmp_path):
    done = engine(*SWEEP, "seed=1,2", f"output_root={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: Each sweep job asks for 8 CPU(s) (`hydra.launcher.cpus_per_task`)"
    )
    assert "partition `debug`" in line
    assert not (tmp_path / "out").exists()
