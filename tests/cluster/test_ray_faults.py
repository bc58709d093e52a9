"""Faults on a real Ray cluster, through the engine's own command:
- a worker node lost mid-stage: the stage runs again on the other node, from its last
  checkpoint, to the weights of an uninterrupted run;
- a stage whose process dies (as the OOM killer kills one): its child never runs, the command
  does not exit 0 (Axolotl #3048), and `runs jobs` names the stage and why;
- Ctrl-C on the command, or `ray job stop` of a command run as a Ray job: every process of
  the stage stops and nothing half-written is in the store; the same command resumes;
- a user's reward module the nodes cannot import (Axolotl PR #2901): refused at `plan` naming
  the node, before anything is submitted; shipped with `ray.runtime_env.py_modules`, it trains.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from engine_cli import CHECKOUT_PATH, engine, manifests, weight_hashes
from test_slurm_faults import checkpoints, wait_for

pytestmark = pytest.mark.cluster

# One key for the tests here: long enough (a minute on one thread) to be stopped halfway.
FAULT = [
    "recipe=text-lora",
    "device=cpu",
    "eval.enabled=false",
    "stage.llm.train.max_steps=1200",
    "stage.llm.train.save_steps=100",
    "stage.llm.train.logging_steps=100",
]
# A stage's task computes with its one CPU's thread; the run here with one too.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("uninterrupted")
    done = engine(*FAULT, f"output_root={root}", cwd=root, env=ONE_THREAD)
    assert done.returncode == 0, done.stderr[-3000:]
    return weight_hashes(root)


def start(cluster, root: Path, *extra: str) -> subprocess.Popen:
    """The command in the background, as a user starts it in a terminal."""
    command = [sys.executable, "-m", "recipe_engine", *FAULT, "launcher=ray",
               f"ray.address={cluster.address}", f"output_root={root}", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": CHECKOUT_PATH, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def stage_processes(stage: str) -> list[psutil.Process]:
    """The engine's processes running `stage` on any node."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if "recipe_engine" in line and f"only=[{stage}]" in line:
            found.append(process)
    return found


def test_a_worker_lost_mid_stage_resumes_on_the_other_to_the_same_weights(
    ray_cluster, tmp_path, uninterrupted
):
    running = start(ray_cluster, tmp_path)
    wait_for(lambda: checkpoints(tmp_path), 300, "a first checkpoint")
    lost = ray_cluster.node_running("only=[llm]")
    ray_cluster.kill_node(lost)
    try:
        out, err = running.communicate(timeout=600)
    finally:
        ray_cluster.start_worker(lost)
    assert running.returncode == 0, out[-3000:] + err[-3000:]
    assert "stage llm: its node was lost" in out
    assert "stage llm: running on the Ray cluster (try 2)" in out
    [log] = tmp_path.glob("runs/text-lora/*/llm/ray/node-0.log")
    assert "stage llm: resuming from" in log.read_text()
    assert weight_hashes(tmp_path) == uninterrupted


def test_a_stage_whose_process_dies_leaves_its_child_unrun_and_says_why(ray_cluster, tmp_path):
    r3 = ["recipe=r3-two-stage", "device=cpu", "eval.enabled=false",
          "stage.vision.train.max_steps=3000", "stage.vision.train.save_steps=100",
          "stage.llm.train.max_steps=3"]  # fmt: skip
    command = [sys.executable, "-m", "recipe_engine", *r3, "launcher=ray",
               f"ray.address={ray_cluster.address}", f"output_root={tmp_path}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": CHECKOUT_PATH}
    running = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(lambda: checkpoints(tmp_path), 300, "the vision stage training")
    for process in stage_processes("vision"):
        process.kill()  # as the kernel's OOM killer does
    out, err = running.communicate(timeout=300)
    assert running.returncode == 1, out[-2000:]  # never 0 for a run whose stage failed
    [line] = err.strip().splitlines()[-1:]
    assert line.startswith("error: stage vision did not commit on the cluster (FAILED: ")
    assert "not run because of it: llm" in line
    assert manifests(tmp_path) == {}
    shown = engine("runs", "jobs", f"output_root={tmp_path}", cwd=tmp_path)
    rows = {row.split()[0]: row.split()[2] for row in shown.stdout.splitlines()[2:4]}
    assert rows == {"vision": "FAILED", "llm": "NOT_RUN"}, shown.stdout
    [why] = [row for row in shown.stdout.splitlines() if row.startswith("llm:")]
    assert "not run: its parent stage vision (job vision-1) ended FAILED" in why
    [failed] = [row for row in shown.stdout.splitlines() if row.startswith("vision:")]
    assert "FAILED (exit -9: on " in failed and "killed by SIGKILL" in failed


def test_ctrl_c_stops_every_process_writes_nothing_half_and_the_same_command_resumes(
    ray_cluster, tmp_path, uninterrupted
):
    running = start(ray_cluster, tmp_path)
    wait_for(lambda: checkpoints(tmp_path), 300, "a first checkpoint")
    running.send_signal(signal.SIGINT)
    out, err = running.communicate(timeout=120)
    assert running.returncode == 1, out[-2000:] + err[-2000:]
    stopped = "error: the run was stopped (Ctrl-C or SIGTERM): stage(s) llm cancelled"
    assert stopped in err, err[-3000:]
    wait_for(lambda: not stage_processes("llm"), 60, "the stage's processes to stop")
    assert manifests(tmp_path) == {}  # nothing half-written counts as committed
    [states] = tmp_path.glob("runs/text-lora/*/ray-states.json")
    assert json.loads(states.read_text())["llm-1"]["said"] == "CANCELLED"
    again = start(ray_cluster, tmp_path)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, out[-3000:] + err[-3000:]
    assert weight_hashes(tmp_path) == uninterrupted


def test_ray_job_stop_of_the_command_run_as_a_ray_job_leaves_nothing_half_written(
    ray_cluster, tmp_path
):
    ray = str(Path(sys.executable).with_name("ray"))
    command = [sys.executable, "-m", "recipe_engine", *FAULT, "launcher=ray",
               f"output_root={tmp_path}"]  # fmt: skip
    submitted = subprocess.run(
        [ray, "job", "submit", f"--address={ray_cluster.dashboard}", "--no-wait", "--",
         *command],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
    [job] = [
        w.strip("'") for w in submitted.stdout.split() if w.strip("'").startswith("raysubmit_")
    ][:1]
    wait_for(lambda: checkpoints(tmp_path), 300, "a first checkpoint")
    subprocess.run([ray, "job", "stop", f"--address={ray_cluster.dashboard}", job],
                   capture_output=True, text=True, check=True)  # fmt: skip
    wait_for(lambda: not stage_processes("llm"), 90, "the stage's processes to stop")
    assert manifests(tmp_path) == {}
    [states] = tmp_path.glob("runs/text-lora/*/ray-states.json")
    wait_for(lambda: json.loads(states.read_text())["llm-1"]["said"] == "CANCELLED", 60,
             "the driver to record the stop")  # fmt: skip


REWARD = """
def length_reward(completions, **columns):
    return [-float(len(str(c))) for c in completions]
"""
R7 = [
    "recipe=r7-sft-grpo",
    "device=cpu",
    "data.max_samples=32",
    "eval.enabled=false",
    "stage.llm.train.max_steps=2",
    "stage.grpo.train.max_steps=2",
    "stage.grpo.rewards=[{fn: my_rewards:length_reward, weight: 1.0}]",
]


def test_a_reward_module_the_nodes_lack_is_refused_first_and_trains_once_shipped(
    ray_cluster, tmp_path
):
    package = tmp_path / "plugins" / "my_rewards"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(REWARD)
    # Found here through PYTHONPATH; the nodes were started without it.
    env = {**os.environ, "PYTHONPATH": f"{package.parent}{os.pathsep}{CHECKOUT_PATH}"}
    out = tmp_path / "outputs"
    refused = engine(*R7, "launcher=ray", f"ray.address={ray_cluster.address}",
                     f"output_root={out}", cwd=tmp_path, env=env)  # fmt: skip
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: Node ") and "cannot run this recipe's stages" in line
    assert "`stage.grpo.rewards[0]` (my_rewards:length_reward)" in line
    assert "no module 'my_rewards'" in line and "ray.runtime_env" in line
    assert not out.exists()
    shipped = engine(*R7, "launcher=ray", f"ray.address={ray_cluster.address}",
                     f"+ray.runtime_env.py_modules=[{package}]", f"output_root={out}",
                     cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert shipped.returncode == 0, shipped.stdout[-3000:] + shipped.stderr[-3000:]
    assert sorted(manifests(out)) == ["grpo", "llm"]
    [log] = out.glob("runs/r7-sft-grpo/*/grpo/ray/node-0.log")
    assert "rewards/length_reward/mean" in log.read_text()
