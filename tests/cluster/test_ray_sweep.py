"""Sweeps and experiments with `launcher=ray` on the test cluster: every job's pending stages
run as tasks of the cluster, and a stage several jobs share trains once: the jobs after the
one that trained it reuse it from the store (its records say so); jobs run side by side
(`hydra/launcher=joblib`) wait for it off the cluster, then reuse it."""

from __future__ import annotations

import pytest
from engine_cli import engine, stored_stages

from recipe_engine.report.sweep import JOBS_FILE, SweepJob, read_jobs

pytestmark = pytest.mark.cluster

SWEEP = [
    "-m",
    "recipe=r3-two-stage",
    "device=cpu",
    "data.max_samples=32",
    "eval.enabled=false",
    "stage.vision.train.max_steps=3",
    "stage.llm.train.max_steps=3",
    "launcher=ray",
]


def status_of(job: SweepJob, stage: str) -> str:
    return next(s.status for s in job.stages if s.stage == stage)


@pytest.mark.parametrize("side_by_side", [False, True], ids=["one-by-one", "joblib"])
def test_a_ray_sweep_trains_the_shared_stage_once_and_lists_every_job(
    ray_cluster, tmp_path, side_by_side
):
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=3"] if side_by_side else []
    done = engine(
        *SWEEP,
        *parallel,
        f"ray.address={ray_cluster.address}",
        "stage.llm.train.learning_rate=1e-4,2e-4,3e-4",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = (tmp_path / "sweeps" / "r3-two-stage").iterdir()
    jobs = read_jobs(folder / JOBS_FILE)
    assert len(jobs) == 3 and all(j.status == "completed" for j in jobs)
    assert sorted(status_of(j, "vision") for j in jobs) == ["cached", "cached", "trained"]
    assert sorted(status_of(j, "llm") for j in jobs) == ["trained"] * 3
    assert stored_stages(tmp_path) == ["llm", "llm", "llm", "vision"]
    # Every job's stages went to the cluster: each job's run recorded its tasks.
    assert len(list(folder.glob("*/jobs.json"))) == 3
    if side_by_side:  # two jobs found the shared stage in training by the third, and waited
        assert done.stdout.count("stage vision: in the store (committed by another run)") == 2


def test_an_experiment_on_ray_trains_the_stage_two_recipes_share_once(ray_cluster, tmp_path):
    done = engine(
        "compare",
        "recipes=[text-lora,r6-sft-kto-text]",
        "seeds=[0]",
        "device=cpu",
        "data.max_samples=32",
        "eval.max_samples=4",
        "stage.llm.train.max_steps=3",
        "stage.kto.train.max_steps=2",
        "launcher=ray",
        f"ray.address={ray_cluster.address}",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert stored_stages(tmp_path) == ["kto", "llm"]  # the shared SFT stage trained once
    assert done.stdout.count("stage llm: running on the Ray cluster") == 1
    assert "stage kto: running on the Ray cluster" in done.stdout
    assert list(tmp_path.glob("experiments/*/*/experiment.md"))
