"""Trainable-parameter report and dtype/device census, per component."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from policy_steps import apply_lora
from tiny_configs import tiny_model

from recipe_engine.plan.components import component_of
from recipe_engine.run.census import census, format_report, trainable_report
from recipe_engine.run.policies import apply_freeze
from recipe_engine.store.stage_records import ComponentCensus, TrainableCount


def sizes(model: Any, layout: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, param in model.named_parameters():
        comp = component_of(name, layout)
        out[comp] = out.get(comp, 0) + param.numel()
    return out


def test_report_after_freeze() -> None:
    model = tiny_model("qwen2_vl")
    apply_freeze(model, layout="qwen2_vl", components=["vision_tower"], patterns=[])
    report = trainable_report(model, layout="qwen2_vl")
    expected = sizes(model, "qwen2_vl")
    assert list(report) == [
        "vision_tower",
        "projector",
        "language_model",
        "embeddings",
        "lm_head",
        "total",
    ]
    for comp, n in expected.items():
        assert report[comp].params == n
    assert report["vision_tower"] == TrainableCount(
        params=expected["vision_tower"], trainable=0, percent=0.0
    )
    assert report["projector"].percent == 100.0
    total = sum(expected.values())
    trained = total - expected["vision_tower"]
    assert report["total"].params == total
    assert report["total"].trainable == trained
    assert report["total"].percent == pytest.approx(100 * trained / total, abs=1e-4)


def test_report_after_lora_ignores_original_module_copies() -> None:
    model = tiny_model("llama")
    before = sizes(model, "causal_lm")
    peft_model = apply_lora(model, layout="causal_lm", lora={"r": 2}, frozen=["embeddings"])
    report = trainable_report(peft_model, layout="causal_lm")
    # lm_head is trained in full through modules_to_save: counted once, 100 %.
    assert report["lm_head"] == TrainableCount(
        params=before["lm_head"], trainable=before["lm_head"], percent=100.0
    )
    assert report["embeddings"].trainable == 0
    lm = report["language_model"]
    lora_params = lm.params - before["language_model"]
    assert lora_params > 0 and lm.trainable == lora_params
    assert 0 < lm.percent < 100


def test_census_dtype_and_device() -> None:
    model = tiny_model("llava").to(torch.bfloat16)
    model.lm_head.float()
    cells = census(model, layout="llava")
    expected = sizes(model, "llava")
    assert cells["vision_tower"] == ComponentCensus(
        dtype={"torch.bfloat16": expected["vision_tower"]},
        device={"cpu": expected["vision_tower"]},
    )
    assert cells["lm_head"].dtype == {"torch.float32": expected["lm_head"]}
    meta = census(tiny_model("llama", device="meta"), layout="causal_lm")
    assert set(meta["language_model"].device) == {"meta"}


def test_format_report() -> None:
    model = tiny_model("qwen2_vl")
    apply_freeze(model, layout="qwen2_vl", components=["vision_tower"], patterns=[])
    text = format_report(
        trainable_report(model, layout="qwen2_vl"), census(model, layout="qwen2_vl")
    )
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["component", "params", "trainable", "%"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {
        "vision_tower",
        "projector",
        "language_model",
        "embeddings",
        "lm_head",
        "total",
    }
    assert " 0.00 " in rows["vision_tower"] and "float32" in rows["vision_tower"]
    assert "100.00" in rows["lm_head"] and "cpu" in rows["lm_head"]
