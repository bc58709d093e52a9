"""Data parallelism for real on CPU: DDP through torch.distributed.run with the gloo backend."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from engine_cli import engine, forked_engine, free_port, launcher_env

SMALL = [
    "recipe=r1-llm-only",
    "device=cpu",
    "data.max_samples=32",
    "eval.max_samples=4",
    "stage.llm.train.num_train_epochs=1",
    "stage.llm.train.per_device_train_batch_size=8",
]
# The end-of-run compare after a distributed run is a process of its own (an engine's imports
# again): the torchrun run below ends with it and is checked for it; the other runs here skip it.
NO_COMPARE = "eval.compare=false"


def manifests(output_root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(output_root.glob("store/*/manifest.json"))]


@pytest.fixture(scope="module")
def single_and_ddp(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    single = engine(*SMALL, NO_COMPARE, f"output_root={root / 'single'}", cwd=root)
    (root / "tmp").mkdir()  # its own temporary directory, to see what the launch leaves there
    ddp = forked_engine(*SMALL, "parallel=ddp", "nproc=2", f"output_root={root / 'ddp'}",
                        cwd=root, env={"TMPDIR": str(root / "tmp")})  # fmt: skip
    return root, single, ddp


def test_a_launch_leaves_nothing_in_the_temporary_directory(single_and_ddp):
    """torchrun's agent makes a log folder per launch and never removes it: the engine hands
    it one of its own, removed after the launch."""
    root, _, ddp = single_and_ddp
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    # torch's compile cache (torchinductor_<user>) is shared by every run, kept on purpose.
    left = [p.name for p in (root / "tmp").iterdir() if not p.name.startswith("torchinductor_")]
    assert left == []


def test_ddp_trains_with_two_processes_and_halves_the_steps(single_and_ddp):
    root, single, ddp = single_and_ddp
    assert single.returncode == 0, single.stderr[-2000:]
    assert ddp.returncode == 0, ddp.stderr[-30000:]  # a rank's own error, not only the summary
    assert "launching 2 processes" in ddp.stderr
    [one] = manifests(root / "single")
    [two] = manifests(root / "ddp")
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one["metrics"]["steps"] == 4  # ceil(32 / (8 x 1 x 1))
    assert two["metrics"]["steps"] == one["metrics"]["steps"] // 2
    assert two["placement"]["mode"] == "ddp"
    # Only rank 0 writes the run summary.
    summaries = list((root / "ddp").glob("runs/*/*/summary.json"))
    assert len(summaries) == 1
    # ... and ends the run with its compare, run as `compare run=<run>` in a process of its own.
    [run_dir] = [summary.parent for summary in summaries]
    assert "the compare report failed" not in ddp.stdout + ddp.stderr
    assert f"report:    {run_dir / 'compare.md'}" in ddp.stdout
    assert (run_dir / "compare.md").is_file()


def test_ddp_and_single_process_are_different_stages(single_and_ddp):
    root, _, _ = single_and_ddp
    [one], [two] = manifests(root / "single"), manifests(root / "ddp")
    assert one["fingerprint"] != two["fingerprint"], "world size changes the effective batch"


def test_accelerate_launch_trains_the_same_stage_as_torchrun(single_and_ddp, tmp_path):
    """`accelerate launch` with two CPU processes: `--multi_gpu` is accelerate's name for its
    torch.distributed launcher (without it, `--cpu` would start one process); the stage is the
    one the engine's own torchrun launch trained, split the same way, and a key names a
    result: the second DDP training of the key ends at the same weights, bit for bit."""
    root, _, _ = single_and_ddp
    launch = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes=2", "--num_machines=1",
        "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={free_port()}",
        "-m", "recipe_engine", *SMALL, NO_COMPARE, "parallel=ddp",
        f"output_root={tmp_path / 'out'}",
    ]  # fmt: skip
    done = subprocess.run(
        launch,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=launcher_env(tmp_path),
    )
    # The whole output: a rank that dies prints its own error well before the launcher's summary.
    assert done.returncode == 0, done.stderr[-30000:]
    [accelerated], [torchrun] = manifests(tmp_path / "out"), manifests(root / "ddp")
    assert accelerated["world_size"] == 2
    assert accelerated["metrics"]["steps"] == torchrun["metrics"]["steps"]
    assert accelerated["fingerprint"] == torchrun["fingerprint"]
    assert weight_hashes(tmp_path / "out") == weight_hashes(root / "ddp")


def weight_hashes(output_root: Path) -> dict[str, str]:
    files = sorted(output_root.glob("store/*/*.safetensors"))
    assert files, f"no weights under {output_root}"
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_two_nodes_on_loopback_train_one_stage(tmp_path):
    """torchrun --nnodes=2 --node_rank=N --master_addr=127.0.0.1: two "nodes", one process each."""
    port = free_port()
    run_dir = tmp_path / "out" / "runs" / "two-nodes"
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node_rank={rank}",
                "--nproc_per_node=1",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                "-m",
                "recipe_engine",
                *SMALL,
                NO_COMPARE,
                "parallel=ddp",
                f"output_root={tmp_path / 'out'}",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=launcher_env(tmp_path),
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    [manifest] = manifests(tmp_path / "out")
    assert manifest["world_size"] == 2 and manifest["metrics"]["steps"] == 2
    assert (run_dir / "summary.json").is_file()
