"""Faults a cluster brings, on the test cluster: a stage job cancelled mid-training and one
past its time limit end, with the same command, in the weights of an uninterrupted run of
the same key (no partial entry is ever complete in the store); a node that goes down while
its job runs is one line in `runs jobs` naming the node and what to run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import job_ids, wait_for_jobs
from engine_cli import engine, manifests, weight_hashes

pytestmark = pytest.mark.cluster

# One key for every test here: long enough on this machine (2 cores) to be stopped halfway.
FAULT = [
    "recipe=text-lora",
    "device=cpu",
    "eval.enabled=false",
    "stage.llm.train.max_steps=3000",  # ~2 min of training: past a one-minute limit
    "stage.llm.train.save_steps=200",
    "stage.llm.train.logging_steps=200",
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("uninterrupted")
    done = engine(*FAULT, f"output_root={root}", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return weight_hashes(root)


def checkpoints(output_root: Path) -> list[Path]:
    return sorted(output_root.glob("store/*.partial/checkpoints/checkpoint-*/trainer_state.json"))


def submit(output_root: Path, *extra: str) -> str:
    done = engine(*FAULT, "launcher=slurm", *extra, f"output_root={output_root}", cwd=output_root)
    assert done.returncode == 0, done.stderr[-3000:]
    [job] = job_ids(done.stdout).values()
    return job


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_cancelled_stage_job_resumes_with_the_same_command_to_the_same_weights(
    slurm, tmp_path, uninterrupted
):
    job = submit(tmp_path)
    wait_for(lambda: checkpoints(tmp_path), 300, "a first checkpoint")
    slurm.command("scancel", job)
    assert wait_for_jobs(slurm, [job], 120)[job]["State"] == "CANCELLED"
    assert manifests(tmp_path) == {}  # nothing complete in the store
    again = submit(tmp_path)
    assert wait_for_jobs(slurm, [again], 600)[again]["State"] == "COMPLETED"
    [log] = tmp_path.glob(f"runs/text-lora/*/llm/slurm/{again}_0_log.out")
    assert "stage llm: resuming from" in log.read_text()
    assert weight_hashes(tmp_path) == uninterrupted


def test_a_stage_job_past_its_time_limit_resumes_to_the_same_weights(
    slurm, tmp_path, uninterrupted
):
    limit = ("slurm.time=1", "slurm.signal_delay_s=0")  # killed at one minute (+ SLURM's tick)
    job = submit(tmp_path, *limit)
    assert wait_for_jobs(slurm, [job], 600)[job]["State"] == "TIMEOUT"
    for _ in range(8):  # the same command, until the stage is in the store (a minute each)
        if manifests(tmp_path):
            break
        assert checkpoints(tmp_path)  # what the stopped attempt had saved
        again = submit(tmp_path, *limit)
        wait_for_jobs(slurm, [again], 300)
    assert weight_hashes(tmp_path) == uninterrupted


def test_a_node_that_goes_down_under_a_job_is_one_line_naming_it(slurm, tmp_path):
    out = f"output_root={tmp_path}"
    job = submit(tmp_path, "+slurm.additional_parameters.no_requeue=true")
    wait_for(lambda: checkpoints(tmp_path), 300, "the job training")
    [node] = slurm.command("squeue", "-h", "-j", job, "-o", "%N").split()
    slurm.kill_node(node)
    try:
        slurm.command("scontrol", "update", f"nodename={node}", "state=down", "reason=test-fault")
        assert wait_for_jobs(slurm, [job], 180)[job]["State"] == "NODE_FAIL"
        shown = engine("runs", "jobs", out, cwd=tmp_path)
    finally:
        slurm.resume_node(node)
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("llm:")]
    assert f"node {node} went down (test-fault)" in line
    assert f"scontrol update nodename={node} state=resume" in line
    assert "launcher=slurm" in line and "resumes from its last checkpoint" in line
