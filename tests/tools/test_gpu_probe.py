"""The probe line `gpu_check` reads back: one flat JSON object per stage, and the forward hook
that fills its autocast facts (run here on CPU: CUDA autocast is off)."""

from __future__ import annotations

import json

import torch

from recipe_engine.tools.gpu_probe import (
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
