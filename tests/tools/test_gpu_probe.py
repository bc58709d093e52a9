"""The probe line `gpu_check` reads back: one flat JSON object per stage, and the forward hook
that fills its autocast facts (run here on CPU: CUDA autocast is off)."""

from __future__ import annotations

import json

import torch
from engine_cli import forked_engine

from tools.gpu_probe import (
    ForwardFacts,
    ProbeRecord,
    TrainerFacts,
    autocast_hook,
    read_probes,
)

TRAINER = TrainerFacts(
    n_gpu=1,
    bf16=True,
    mixed_precision="bf16",
    world_size=1,
    device_map={"": 0},
    mode="single",
    data_parallel=False,
    param_devices=["cuda:0"],
    params_4bit=12,
    params_4bit_devices=["cuda:0"],
)


def test_a_probe_line_is_one_flat_object_and_reads_back(tmp_path):
    record = ProbeRecord("llm", TRAINER, ForwardFacts(True, "bfloat16", "CausalLMOutput"))
    line = record.to_json()
    assert list(line)[:4] == ["stage", "autocast", "autocast_dtype", "output"]
    assert line["params_4bit"] == 12 and line["device_map"] == {"": 0}
    path = tmp_path / "probe.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(ProbeRecord("vision", TRAINER).to_json()))
    first, second = read_probes(path)
    assert first == record
    assert second.forward is None and second.trainer == TRAINER


def test_the_hook_records_the_first_forward_only():
    seen: list[ForwardFacts] = []
    layer = torch.nn.Linear(2, 2)
    layer.register_forward_hook(autocast_hook(seen))
    layer(torch.zeros(1, 2))
    layer(torch.zeros(1, 2))
    assert seen == [ForwardFacts(False, seen[0].autocast_dtype, "Tensor")]


def test_a_probed_stage_records_the_fused_heads_tile_as_trl_projected_it(tmp_path):
    """On a CPU TRL scores every position of the batch, in the hidden states' dtype (no
    autocast): the rows and dtype the memory estimate takes for its `logits` part."""
    out, prelude = tmp_path / "probe.jsonl", tmp_path / "arm.py"
    prelude.write_text(f"from tools.gpu_probe import arm_probe\narm_probe({str(out)!r}, '')\n")
    done = forked_engine(
        "recipe=text-lora", "++stage.llm.train.max_steps=1", "data.max_samples=8",
        "stage.llm.train.per_device_train_batch_size=4", "eval.enabled=false",
        "eval.compare=false", f"output_root={tmp_path / 'out'}", cwd=tmp_path, prelude=prelude,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [record] = read_probes(out)
    assert record.forward is not None and record.forward.autocast is False
    assert record.head is not None and record.head.head_dtype == "float32"
    # Every position of the 4 padded rows: a multiple of 4, more than the rows' labelled tokens.
    assert record.head.head_rows % 4 == 0 and record.head.head_rows > 4
