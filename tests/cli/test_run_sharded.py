"""Sharded data parallelism for real on CPU: DeepSpeed ZeRO-2 and ZeRO-3 stages through the
engine's own torchrun launch (2 gloo processes, DeepSpeed's CPU accelerator), checked as DDP
is (tests/cli/test_run_distributed.py): world size, step count, the guard's checks, and a
committed stage that loads back and generates. FSDP is refused on CPU with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_cli import engine

from recipe_engine.store.records import ADAPTER

# A distributed run's closing compare is a process of its own, checked after DDP
# (tests/cli/test_run_distributed.py); each stage's own evaluation (rank 0) still runs here.
SHORT = ["device=cpu", "data.max_samples=32", "eval.max_samples=4", "eval.compare=false"]
SHORT += ["parallel=deepspeed", "nproc=2"]
QLORA_ZERO2 = [
    "recipe=r1-llm-only",
    "stage.llm.train.num_train_epochs=1",
    "stage.llm.train.per_device_train_batch_size=8",
]
FULL_ZERO3 = [
    "recipe=r2-vision-only",
    "stage.vision.train.num_train_epochs=1",
    "stage.vision.train.per_device_train_batch_size=8",
    "++stage.vision.train.deepspeed.zero_optimization.stage=3",
]


def manifest(output_root: Path) -> tuple[Path, dict]:
    [path] = sorted(output_root.glob("store/*/manifest.json"))
    return path.parent, json.loads(path.read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("deepspeed")
    stages = {}
    for name, recipe in (("zero2", QLORA_ZERO2), ("zero3", FULL_ZERO3)):
        done = engine(*recipe, *SHORT, f"output_root={root / name}", cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "launching 2 processes" in done.stderr
        stages[name] = manifest(root / name)
    return stages


@pytest.mark.parametrize("name, zero", [("zero2", 2), ("zero3", 3)])
def test_deepspeed_trains_with_two_processes_as_planned(trained, name: str, zero: int) -> None:
    _, record = trained[name]
    assert record["world_size"] == 2 and record["placement"]["mode"] == "deepspeed"
    assert record["trainer"]["deepspeed"]["zero_optimization"]["stage"] == zero
    assert not record["placement"]["use_cpu"]  # accelerate starts DeepSpeed only then
    # ceil(32 rows / (8 per device x 2 processes)): the steps DDP takes, checked by the guard
    assert record["metrics"]["steps"] == record["metrics"]["planned_steps"] == 2
    # rank 0 generated with the committed weights (ZeRO-3: loaded back from the store)
    assert record["metrics"]["evaluation_error"] is None
    assert record["metrics"]["eval_accuracy"] is not None


def test_a_zero3_stage_commits_gathered_weights_that_load_and_generate(trained) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder, record = trained["zero3"]
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    trained_names = set(record["trained_parameters"])
    state = model.state_dict()
    assert trained_names and all(state[n].numel() > 0 for n in trained_names if n in state)
    processor = AutoProcessor.from_pretrained(folder)
    prompt = processor.tokenizer("a red", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 3


def test_a_qlora_zero2_stage_commits_an_adapter_on_its_base(trained) -> None:
    folder, record = trained["zero2"]
    assert record["format"] == ADAPTER
    assert (folder / "adapter_model.safetensors").is_file()


def test_plan_says_where_deepspeed_ran_and_fsdp_is_refused_on_cpu(tmp_path: Path) -> None:
    planned = engine("plan", *QLORA_ZERO2, *SHORT, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "deepspeed on CPU ran in this project's tests" in planned.stdout
    fsdp = [a if a != "parallel=deepspeed" else "parallel=fsdp" for a in SHORT]
    refused = engine(*QLORA_ZERO2, *fsdp, f"output_root={tmp_path / 'out'}", cwd=tmp_path)
    assert refused.returncode == 2
    [line] = [x for x in refused.stderr.splitlines() if x.startswith("error:")]
    assert "accelerate turns FSDP on only for GPUs" in line and "parallel=ddp" in line
    assert not (tmp_path / "out").exists()


def test_a_run_trains_an_sft_stage_then_a_full_dpo_stage_under_zero3(tmp_path: Path) -> None:
    """Two DeepSpeed stages in one run (each Trainer makes its own Accelerator: accelerate
    refused the second stage's plugin until the engine cleared its state between stages), the
    second a full-weight DPO stage whose frozen reference copy is sharded too."""
    done = engine(
        "recipe=r5-sft-dpo-text",
        *SHORT,
        "stage.dpo.data.max_samples=32",
        "stage.dpo.lora=null",
        "++stage.llm.train.max_steps=2",
        "++stage.dpo.train.max_steps=2",
        "++stage.dpo.train.deepspeed.zero_optimization.stage=3",
        f"output_root={tmp_path / 'out'}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = {}
    for path in (tmp_path / "out").glob("store/*/manifest.json"):
        record = json.loads(path.read_text())
        records[record["stage"]] = record
    assert set(records) == {"llm", "dpo"}
    dpo = records["dpo"]
    assert dpo["config"]["trainer"] == "dpo" and dpo["world_size"] == 2
    assert dpo["trainer"]["deepspeed"]["zero_optimization"]["stage"] == 3
    assert dpo["metrics"]["steps"] == 2
    accuracy = dpo["metrics"]["preference"]["reward_accuracy"]  # a share of held-out pairs
    assert isinstance(accuracy, float) and 0.0 <= accuracy <= 1.0
