"""The sweep table: a Hydra callback recording each multirun job, then sweep.md / sweep.csv."""

from __future__ import annotations

import csv
import json
import multiprocessing
import subprocess
from pathlib import Path

from engine_cli import engine
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from recipe_engine.report.sweep import (
    JOBS_FILE,
    SweepJob,
    SweepTable,
    append_line,
    read_jobs,
    render_markdown,
    sweep_dir_of,
)

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "recipe=r3-two-stage",
    "data.max_samples=16",
    "eval.max_samples=4",
    "eval.compare=false",
    "stage.vision.train.max_steps=2",
    "stage.llm.train.max_steps=2",
]


def sweep(output_root: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run a multirun sweep as a user would; return the process and its sweep folder."""
    result = engine("-m", *SMALL, f"output_root={output_root}", *args, cwd=ROOT, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (folder,) = (output_root / "sweeps" / "r3-two-stage").iterdir()
    return result, folder


def store_stages(output_root: Path) -> list[str]:
    """The stage of every committed store entry."""
    return [
        json.loads((e / "manifest.json").read_text())["stage"]
        for e in (output_root / "store").iterdir()
        if (e / "COMPLETE").is_file()
    ]


def status_of(job: SweepJob, stage: str) -> str:
    return next(s.status for s in job.stages if s.stage == stage)


def key_of(job: SweepJob, stage: str) -> str:
    return next(s.key for s in job.stages if s.stage == stage)


def test_sweep_trains_the_shared_parent_once_and_tabulates_every_job(tmp_path):
    result, folder = sweep(tmp_path, "stage.llm.train.learning_rate=1e-4,2e-4,3e-4")
    assert store_stages(tmp_path).count("vision") == 1
    assert store_stages(tmp_path).count("llm") == 3

    jobs = read_jobs(folder / JOBS_FILE)
    assert [j.job for j in jobs] == [0, 1, 2]
    assert [status_of(j, "vision") for j in jobs] == ["trained", "cached", "cached"]
    assert len({key_of(j, "vision") for j in jobs}) == 1
    assert len({key_of(j, "llm") for j in jobs}) == 3
    assert all(j.status == "completed" for j in jobs)
    # Only the swept override tells the jobs apart in the table.
    assert "++stage.llm.train.learning_rate=0.0002" in jobs[1].overrides
    llm = next(s for s in jobs[2].stages if s.stage == "llm")
    assert llm.eval_accuracy is not None and llm.eval_loss is not None

    table = (folder / "sweep.md").read_text()
    assert table.splitlines()[-3].startswith("| 0 ")
    assert "learning_rate=0.0003" in table and "cached `" in table
    assert "recipe=r3-two-stage" in table.split("|")[0]  # shared overrides above the table
    assert "| 2   | ++stage.llm.train.learning_rate=0.0003" in result.stdout  # printed too
    rows = list(csv.DictReader((folder / "sweep.csv").open()))
    assert [r["vision.status"] for r in rows] == ["trained", "cached", "cached"]
    assert len({r["llm.entry"] for r in rows}) == 3


def test_joblib_jobs_share_an_uncached_parent_through_the_store_lock(tmp_path):
    """Two processes need the same untrained parent at once: one trains it, one waits."""
    _, folder = sweep(
        tmp_path,
        "stage.llm.train.learning_rate=1e-4,2e-4",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "eval.enabled=false",  # the lock is the point here; evaluation only costs time
    )
    jobs = read_jobs(folder / JOBS_FILE)
    assert len(jobs) == 2 and len({j.pid for j in jobs}) == 2  # really two processes
    assert store_stages(tmp_path).count("vision") == 1
    assert sorted(status_of(j, "vision") for j in jobs) == ["cached", "trained"]
    assert len({key_of(j, "llm") for j in jobs}) == 2
    assert (folder / "sweep.md").is_file() and (folder / "sweep.csv").is_file()


def test_submitit_jobs_train_the_shared_parent_once(tmp_path):
    """Three jobs as a scheduler runs them (submitit's local executor: one process each, all
    at once): the per-stage lock lets one train the vision stage, the others reuse it."""
    _, folder = sweep(
        tmp_path,
        "stage.llm.train.learning_rate=1e-3,2e-3,3e-3",
        "hydra/launcher=recipe-submitit-local",
        "device=cpu",  # asks submitit for no GPU
        "eval.enabled=false",
    )
    jobs = read_jobs(folder / JOBS_FILE)
    assert len(jobs) == 3 and len({j.pid for j in jobs}) == 3
    assert all(j.status == "completed" for j in jobs)
    assert store_stages(tmp_path).count("vision") == 1
    assert sorted(status_of(j, "vision") for j in jobs) == ["cached", "cached", "trained"]
    assert len({key_of(j, "llm") for j in jobs}) == 3
    assert (folder / ".submitit").is_dir()  # really submitit's executor
    assert (folder / "sweep.md").is_file() and (folder / "sweep.csv").is_file()


def job_config(tmp_path: Path, mode: RunMode, num: int = 0):
    sweep_dir = tmp_path / "sweeps" / "r" / "t"
    return OmegaConf.create(
        {
            "hydra": {
                "mode": mode,
                "sweep": {"dir": str(sweep_dir), "subdir": str(num)},
                "runtime": {"output_dir": str(sweep_dir / str(num)), "cwd": str(tmp_path)},
                "job": {"num": num},
            }
        }
    )


def test_single_runs_write_no_sweep_files(tmp_path):
    done = JobReturn(overrides=["seed=1"], status=JobStatus.COMPLETED)
    SweepTable().on_job_end(job_config(tmp_path, RunMode.RUN), done)
    assert not list(tmp_path.rglob(JOBS_FILE))


def test_jobs_without_a_summary_and_failed_jobs_are_still_recorded(tmp_path):
    table = SweepTable()
    config = job_config(tmp_path, RunMode.MULTIRUN, num=1)
    assert sweep_dir_of(config) == tmp_path / "sweeps" / "r" / "t"
    failed = JobReturn(overrides=["seed=2"], status=JobStatus.FAILED)
    failed._return_value = ValueError("boom")
    table.on_job_end(config, failed)
    table.on_job_end(
        job_config(tmp_path, RunMode.MULTIRUN, num=0),
        JobReturn(overrides=["seed=1"], status=JobStatus.COMPLETED),
    )
    jobs = read_jobs(sweep_dir_of(config) / JOBS_FILE)
    assert [(j.job, j.status) for j in jobs] == [(0, "completed"), (1, "failed")]
    assert "boom" in jobs[1].error
    table.on_multirun_end(config)
    assert "| 1   | seed=2    | failed" in (sweep_dir_of(config) / "sweep.md").read_text()


def _append_many(path: str, writer: int) -> None:
    for i in range(50):
        append_line(Path(path), json.dumps({"job": writer * 100 + i, "pad": "x" * 5000}))


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / JOBS_FILE
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.starmap(_append_many, [(str(path), w) for w in range(4)])
    jobs = read_jobs(path)
    assert len(jobs) == 200 and len(path.read_text().splitlines()) == 200


def test_markdown_table_shows_only_swept_overrides():
    stages = [{"stage": "a", "status": "trained", "key": "k1", "eval_accuracy": 0.5}]
    jobs = [
        {"job": 0, "overrides": ["x=1", "lr=1"], "status": "completed", "stages": stages},
        {"job": 1, "overrides": ["x=1", "lr=2"], "status": "completed", "stages": []},
    ]
    text = render_markdown([SweepJob.from_json(job) for job in jobs])
    assert "Common overrides: `x=1`" in text
    assert "| 0   | lr=1      | completed | trained `k1` | acc 50% |" in text
    assert "| 1   | lr=2      | completed | -" in text


def test_an_accuracy_measured_on_a_quantized_base_says_so():
    stages = [
        {"stage": "llm", "status": "trained", "key": "k1", "eval_accuracy": 0.93},
        {"stage": "vision", "status": "trained", "key": "k2", "eval_accuracy": 0.95},
    ]
    stages[0]["base_precision"], stages[1]["base_precision"] = "4-bit", "full"
    job = {"job": 0, "overrides": ["lr=1"], "status": "completed", "stages": stages}
    text = render_markdown([SweepJob.from_json(job)])
    assert "acc 93% (4-bit base)" in text
    assert "| acc 95%     |" in text  # full precision: no label
