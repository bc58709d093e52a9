"""`launcher=ray` on a real three-node Ray cluster: every stage one task (one per node of a
multi-node stage), a child after its parent, the keys and weights a local run commits; what no
node can hold and a cluster nothing answers at are one message before anything is written."""

from __future__ import annotations

import os
import re

import pytest
from engine_cli import engine, manifests, weight_hashes
from test_slurm_launcher import planned_keys

pytestmark = pytest.mark.cluster

# Torch computes with as many threads as a stage's task has CPUs (every node's 2 here), and
# the reference run here with as many: weights repeat bitwise for one thread count.
THREADS = {**os.environ, "OMP_NUM_THREADS": "2"}
R3 = [
    "recipe=r3-two-stage",
    "device=cpu",
    "data.max_samples=32",
    "eval.max_samples=4",
    "stage.vision.train.max_steps=3",
    "stage.llm.train.max_steps=3",
]
TEXT_DDP = [
    "recipe=text-lora",
    "device=cpu",
    "parallel=ddp",
    "data.max_samples=32",
    "eval.enabled=false",
    "stage.llm.train.max_steps=4",
]


def on_ray(cluster) -> str:
    return f"ray.address={cluster.address}"


@pytest.fixture(scope="module")
def r3_on_ray(ray_cluster, tmp_path_factory):
    """r3 on the cluster, the address from RAY_ADDRESS as Ray's own CLI reads it, and the
    same recipe trained here."""
    root = tmp_path_factory.mktemp("r3")
    out = f"output_root={root / 'outputs'}"
    local_plan = engine("plan", *R3, out, cwd=root)
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    done = engine(*R3, "launcher=ray", "ray.num_cpus=2", out, cwd=root, env=env, timeout=900)
    local_root = root / "local"
    local = engine(*R3, "eval.compare=false", f"output_root={local_root}", cwd=root, env=THREADS)
    assert local.returncode == 0, local.stderr[-3000:]
    return root, done, planned_keys(local_plan.stdout), local_root


def test_plan_prints_each_stage_task_and_writes_nothing(ray_cluster, tmp_path):
    done = engine(
        "plan", *R3, "launcher=ray", on_ray(ray_cluster), f"output_root={tmp_path / 'out'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("job:")]
    where = f"on the Ray cluster at {ray_cluster.address}"
    assert jobs[0].startswith("job: 1 node(s), 1 process(es) per node, 1 CPU(s)")
    assert jobs[0].endswith("; 1 torch thread(s) per process (its share of the CPUs)")
    assert where in jobs[0] and "after" not in jobs[0]
    assert f"{where}, after vision;" in jobs[1]
    assert list(tmp_path.iterdir()) == []


def test_r3_trains_as_two_dependent_tasks_to_the_keys_and_weights_of_a_local_run(r3_on_ray):
    root, done, keys, local_root = r3_on_ray
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("stage ")]
    # The child started only once its parent had committed.
    assert said.index("stage vision: committed on the Ray cluster") < said.index(
        "stage llm: running on the Ray cluster"
    )
    stored = manifests(root / "outputs")
    assert {name: m["fingerprint"][:12] for name, m in stored.items()} == keys
    assert weight_hashes(root / "outputs") == weight_hashes(local_root)
    # The run ends here as a local one does: its summary, its compare of base and stages.
    [run_dir] = (root / "outputs" / "runs" / "r3-two-stage").iterdir()
    assert (run_dir / "summary.json").is_file() and (run_dir / "compare.md").is_file()
    assert (run_dir / "vision" / "ray" / "node-0.log").is_file()


def test_runs_jobs_shows_each_stage_task_and_its_state(r3_on_ray):
    root = r3_on_ray[0]
    shown = engine("runs", "jobs", f"output_root={root / 'outputs'}", cwd=root)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = {line.split()[0]: line.split() for line in shown.stdout.splitlines()[2:]}
    assert lines["vision"][1:3] == ["vision-1", "COMPLETED"]
    assert lines["llm"][1:3] == ["llm-1", "COMPLETED"]


def test_a_finished_run_again_runs_nothing_on_the_cluster(ray_cluster, r3_on_ray):
    root = r3_on_ray[0]
    out = f"output_root={root / 'outputs'}"
    planned = engine("plan", *R3, "launcher=ray", on_ray(ray_cluster), out, cwd=root)
    assert planned.stdout.count("job: none (in the store, or left out by `only`)") == 2
    again = engine(*R3, "launcher=ray", "ray.num_cpus=2", on_ray(ray_cluster),
                   "eval.compare=false", out, cwd=root)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "running on the Ray cluster" not in again.stdout
    assert re.search(r"^vision\s+cached", again.stdout, re.M)


def test_a_teacher_and_its_sibling_train_at_once_and_the_student_after_both(ray_cluster, tmp_path):
    r8 = [
        "recipe=r8-distill-text",
        "device=cpu",
        "data.max_samples=32",
        "eval.enabled=false",
        "stage.llm.train.max_steps=20",
        "stage.teacher.train.max_steps=20",
        "stage.distill.train.max_steps=2",
    ]
    done = engine(*r8, "launcher=ray", on_ray(ray_cluster), f"output_root={tmp_path}",
                  cwd=tmp_path, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("stage ")]
    started = {line.split()[1].rstrip(":"): said.index(line) for line in said if "running" in line}
    committed = {line.split()[1].rstrip(":"): said.index(line) for line in said
                 if line.endswith("committed on the Ray cluster")}  # fmt: skip
    # Both siblings were running before either committed; the student started after both.
    assert max(started["llm"], started["teacher"]) < min(committed["llm"], committed["teacher"])
    assert started["distill"] > max(committed["llm"], committed["teacher"])
    assert sorted(manifests(tmp_path)) == ["distill", "llm", "teacher"]


def test_a_stage_on_two_nodes_commits_the_weights_of_two_local_processes(ray_cluster, tmp_path):
    cluster_root, local_root = tmp_path / "cluster", tmp_path / "local"
    done = engine(
        *TEXT_DDP, "launcher=ray", on_ray(ray_cluster), "nodes=2", "nproc=1",
        f"output_root={cluster_root}", cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stage llm: running on the Ray cluster on 2 nodes" in done.stdout
    # One task per worker node: never the head's (it has no bundle to give), each node's
    # torchrun keeping its agent's log folder in the stage's run folder.
    [stage_dir] = cluster_root.glob("runs/*/*/llm")
    assert len(list((stage_dir / "torchrun").iterdir())) == 2
    nodes = {(stage_dir / "ray" / f"node-{rank}.log").read_text().split()[2] for rank in (0, 1)}
    assert len(nodes) == 1  # the same address (one host), two node ids:
    ids = {(stage_dir / "ray" / f"node-{rank}.log").read_text().split()[3] for rank in (0, 1)}
    assert len(ids) == 2
    local = engine(*TEXT_DDP, "nproc=2", f"output_root={local_root}", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    on_cluster, here = manifests(cluster_root)["llm"], manifests(local_root)["llm"]
    assert on_cluster["world_size"] == here["world_size"] == 2
    assert on_cluster["fingerprint"] == here["fingerprint"]
    assert weight_hashes(cluster_root) == weight_hashes(local_root)


def test_a_stage_no_node_can_hold_is_one_message_naming_it_and_the_largest_node(
    ray_cluster, tmp_path
):
    out = tmp_path / "out"
    done = engine(*R3, "launcher=ray", on_ray(ray_cluster), "ray.num_cpus=3",
                  f"output_root={out}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: Stage `vision` needs 3 CPU(s) and ")
    assert re.search(r"its largest is \S+ \(\w{8}\) \(2 CPU\(s\), 6 GB\)", line), line
    assert "Set `ray.num_cpus=2` or fewer" in line
    assert not out.exists() and "Traceback" not in done.stderr


def test_more_nodes_than_can_hold_the_stage_is_refused_not_left_waiting(ray_cluster, tmp_path):
    """A head node with nothing to give (LLaMA-Factory #10347 hung at the process group's
    start): three nodes asked of two that can hold a bundle is refused at plan."""
    out = tmp_path / "out"
    done = engine(*TEXT_DDP, "launcher=ray", on_ray(ray_cluster), "nodes=3", "nproc=1",
                  f"output_root={out}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "runs on 3 nodes (`nodes=3`)" in line and "only 2 node(s)" in line
    assert "Set `nodes=2` or fewer" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("127.0.0.1:9", "No Ray cluster answers at 127.0.0.1:9"),
        ("http://127.0.0.1:8265", "is a Ray dashboard's address"),
    ],
)
def test_an_address_no_cluster_answers_at_is_one_message_and_writes_nothing(
    tmp_path, address, said
):
    out = tmp_path / "out"
    done = engine(*R3, "launcher=ray", f"ray.address={address}", f"output_root={out}",
                  cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert said in line and "Traceback" not in done.stderr
    assert not out.exists()


def test_a_node_with_several_gpus_gives_one_stage_task_all_of_them(ray_cluster, tmp_path):
    """LLaMA-Factory #7084 (a device mismatch with several GPUs per worker): a node's one task
    holds every GPU the stage's processes use there, each process its own by LOCAL_RANK. A CPU
    host declares the GPUs to Ray; `plan` sizes the task for them (running it needs CUDA)."""
    ray_cluster.start_worker("gpu-node", cpus=4, gpus=2)
    try:
        done = engine(
            "plan", "recipe=text-lora", "hardware=2x-rtx6000-ada", "parallel=ddp",
            "launcher=ray", on_ray(ray_cluster), "ray.num_cpus=4",
            f"output_root={tmp_path / 'out'}", cwd=tmp_path,
        )  # fmt: skip
        refused = engine(
            "plan", "recipe=text-lora", "hardware=8x-a100-80gb", "parallel=ddp",
            "launcher=ray", on_ray(ray_cluster), "ray.num_cpus=4",
            f"output_root={tmp_path / 'out'}", cwd=tmp_path,
        )  # fmt: skip
    finally:
        ray_cluster.kill_node("gpu-node")
    assert done.returncode == 0, done.stderr[-2000:]
    [job] = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("job:")]
    assert job.startswith("job: 1 node(s), 2 process(es) per node, 2 GPU(s) per node, 4 CPU(s)")
    assert "2 torch thread(s) per process" in job
    assert "device_map: {'': LOCAL_RANK} (each process its own GPU)" in done.stdout
    assert refused.returncode == 2
    assert "needs 4 CPU(s), 8 GPU(s)" in refused.stderr and "2 GPU(s))" in refused.stderr
