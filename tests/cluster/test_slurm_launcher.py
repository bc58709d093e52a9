"""`launcher=slurm` on a real two-node cluster: every stage one job, a child after its parent,
the same keys as on this machine (r3's two stages and a GRPO stage after them: r9-vlm-grpo); a
stage on two nodes; a failed parent cancels its child."""

from __future__ import annotations

import re

import pytest
from conftest import job_ids, wait_for_jobs
from engine_cli import engine, manifests, weight_hashes

pytestmark = pytest.mark.cluster

R9 = [
    "recipe=r9-vlm-grpo",
    "device=cpu",
    "data.max_samples=32",
    "eval.max_samples=4",
    "stage.vision.train.max_steps=3",
    "stage.llm.train.max_steps=3",
    "stage.grpo.train.max_steps=3",
]
TEXT_DDP = [
    "recipe=text-lora",
    "device=cpu",
    "parallel=ddp",
    "data.max_samples=32",
    "eval.enabled=false",
    "stage.llm.train.max_steps=4",
]


def planned_keys(plan_text: str) -> dict[str, str]:
    return dict(re.findall(r"^\[\d+\] stage (\S+)  key (\w+)", plan_text, re.M))


@pytest.fixture(scope="module")
def r9_on_slurm(slurm, tmp_path_factory):
    root = tmp_path_factory.mktemp("r3")
    out = f"output_root={root / 'outputs'}"
    local_plan = engine("plan", *R9, out, cwd=root)
    submitted = engine(*R9, "launcher=slurm", out, cwd=root)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    ids = job_ids(submitted.stdout)
    rows = wait_for_jobs(slurm, list(ids.values()), 600, "Start", "End", "NodeList")
    return root, ids, rows, planned_keys(local_plan.stdout), submitted


def test_plan_prints_each_stage_job_and_writes_nothing(slurm, tmp_path):
    done = engine("plan", *R9, "launcher=slurm", f"output_root={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("job:")]
    assert jobs[0].startswith("job: 1 node(s), 1 process(es) per node, 1 CPU(s)")
    assert "on partition debug" in jobs[0] and "after" not in jobs[0]
    assert jobs[1].endswith("after vision") and jobs[2].endswith("after llm")
    assert list(tmp_path.iterdir()) == []


def test_r9_runs_as_three_dependent_jobs_with_the_keys_of_a_local_run(r9_on_slurm):
    root, ids, rows, keys, submitted = r9_on_slurm
    assert set(ids) == {"vision", "llm", "grpo"}
    assert {rows[i]["State"] for i in ids.values()} == {"COMPLETED"}, rows
    # A child started only once its parent had ended (afterok).
    assert rows[ids["llm"]]["Start"] >= rows[ids["vision"]]["End"]
    assert rows[ids["grpo"]]["Start"] >= rows[ids["llm"]]["End"]
    stored = manifests(root / "outputs")
    assert {name: m["fingerprint"][:12] for name, m in stored.items()} == keys
    assert "runs jobs" in submitted.stdout


def test_runs_jobs_shows_each_stage_job_and_its_state(r9_on_slurm):
    root = r9_on_slurm[0]
    shown = engine("runs", "jobs", f"output_root={root / 'outputs'}", cwd=root)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = {line.split()[0]: line.split() for line in shown.stdout.splitlines()[2:]}
    assert lines["vision"][2] == lines["llm"][2] == lines["grpo"][2] == "COMPLETED"


def test_a_finished_run_submitted_again_submits_nothing(r9_on_slurm):
    root = r9_on_slurm[0]
    out = f"output_root={root / 'outputs'}"
    planned = engine("plan", *R9, "launcher=slurm", out, cwd=root)
    assert planned.stdout.count("job: none (in the store, or left out by `only`)") == 3
    again = engine(*R9, "launcher=slurm", out, cwd=root)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Nothing to submit: every stage is in the store." in again.stdout


def test_a_stage_on_two_nodes_commits_the_weights_of_two_local_processes(slurm, tmp_path):
    cluster_root, local_root = tmp_path / "cluster", tmp_path / "local"
    submitted = engine(
        *TEXT_DDP,
        "launcher=slurm",
        "nodes=2",
        "nproc=1",
        f"output_root={cluster_root}",
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    [job] = job_ids(submitted.stdout).values()
    rows = wait_for_jobs(slurm, [job], 600, "NodeList", "AllocNodes")
    assert rows[job]["State"] == "COMPLETED" and rows[job]["AllocNodes"] == "2", rows
    # Each node's torchrun kept its agent's log folder in the stage's run folder (not in /tmp).
    [torchrun_logs] = cluster_root.glob("runs/*/*/llm/torchrun")
    assert len(list(torchrun_logs.iterdir())) == 2
    local = engine(*TEXT_DDP, "nproc=2", f"output_root={local_root}", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    on_cluster, here = manifests(cluster_root)["llm"], manifests(local_root)["llm"]
    assert on_cluster["world_size"] == here["world_size"] == 2
    assert on_cluster["fingerprint"] == here["fingerprint"]
    assert weight_hashes(cluster_root) == weight_hashes(local_root)


def test_a_failed_parent_leaves_its_child_cancelled_and_says_why(slurm, tmp_path):
    fail_vision = "slurm.setup=['test \"$SLURM_JOB_NAME\" != r9-vlm-grpo-vision || exit 3']"
    out = f"output_root={tmp_path / 'outputs'}"
    submitted = engine(*R9, "launcher=slurm", fail_vision, out, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    ids = job_ids(submitted.stdout)
    rows = wait_for_jobs(slurm, list(ids.values()), 300)
    assert rows[ids["vision"]]["State"] == "FAILED"
    assert rows[ids["llm"]]["State"] == rows[ids["grpo"]]["State"] == "CANCELLED"
    assert manifests(tmp_path / "outputs") == {}
    shown = engine("runs", "jobs", out, cwd=tmp_path)
    [why] = [line for line in shown.stdout.splitlines() if line.startswith("llm:")]
    assert f"its parent stage vision (job {ids['vision']}) ended FAILED" in why


def test_an_option_sbatch_refuses_is_one_message_naming_its_key_and_leaves_nothing(slurm, tmp_path):
    out = tmp_path / "outputs"
    gres = "+slurm.additional_parameters.gres=gpu:1"  # the cluster declares no GPU
    done = engine(*R9, "launcher=slurm", gres, f"output_root={out}", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: sbatch refused stage `vision`'s job: ")
    assert "Invalid generic resource (gres) specification" in line
    assert "set by `slurm.additional_parameters.gres`" in line
    assert not out.exists() and "Traceback" not in done.stderr
