"""Every dtype a stage holds and computes in, decided once by the plan (`plan.precision`)."""

from __future__ import annotations

import pytest
from plans import plan

from recipe_engine.plan.precision import PrecisionPlan, decide_precision, k_bit_storage
from recipe_engine.plan.render import render_plan

NF4 = k_bit_storage("4bit", {"bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"})
GPU = ("hardware=1x-rtx4090", "gpus=0")
BF16 = "model.dtype=bfloat16"


def test_a_bfloat16_qlora_stage_holds_every_unquantized_weight_and_its_adapters_in_bf16() -> None:
    """No float32 upcast of the frozen parts behind the plan's back; LoRA follows QLoRA's
    recipe as TRL casts it (bf16) under a k-bit base in bf16."""
    precision = decide_precision("bfloat16", quantized=NF4, lora=True, trainer={})
    assert precision == PrecisionPlan(
        weights="bfloat16",
        adapters="bfloat16",
        activations="bfloat16",
        autocast=False,
        quantized="4bit nf4 (computed in bfloat16)",
    )


@pytest.mark.parametrize(
    ("dtype", "quantization", "adapters"),
    [
        ("bfloat16", None, "float32"),  # PEFT's autocast_adapter_dtype
        ("float32", NF4, "float32"),  # TRL's bf16 cast undone: the stage is float32
        ("float16", NF4, "float32"),
    ],
)
def test_lora_is_float32_unless_under_a_bfloat16_k_bit_base(dtype, quantization, adapters) -> None:
    precision = decide_precision(dtype, quantized=quantization, lora=True, trainer={})
    assert precision.weights == dtype and precision.adapters == adapters


def test_activations_follow_the_trainers_mixed_precision() -> None:
    mixed = decide_precision("float32", quantized=None, lora=False, trainer={"bf16": True})
    assert (mixed.weights, mixed.activations, mixed.autocast) == ("float32", "bfloat16", True)
    half = decide_precision("float16", quantized=None, lora=False, trainer={"fp16": True})
    assert (half.activations, half.autocast) == ("float16", True)
    assert decide_precision("float32", quantized=None, lora=True, trainer={}).autocast is False


def test_plan_prints_each_stages_precision() -> None:
    text = render_plan(plan("recipe=r3-two-stage", BF16))
    assert "dtype:     bfloat16: weights bfloat16; activations bfloat16 (no autocast)" in text
    assert (
        "dtype:     bfloat16: 4bit nf4 (computed in bfloat16) weights, other weights bfloat16, "
        "LoRA bfloat16; activations bfloat16 (no autocast) in every forward"
    ) in text


def test_on_a_gpu_a_float32_model_at_dtype_auto_autocasts_every_forward() -> None:
    vision = plan("recipe=r2-vision-only", *GPU).stages["vision"]
    assert vision.precision.weights == "float32"
    assert (vision.precision.activations, vision.precision.autocast) == ("bfloat16", True)


def test_the_estimate_counts_the_unquantized_weights_at_the_stages_width() -> None:
    """The QLoRA stage's frozen vision tower, projector and embeddings are counted at two
    bytes in bfloat16 and four in float32: what the run holds (no upcast)."""
    counts = {}
    for dtype in ("float32", "bfloat16"):
        stage = plan("recipe=r1-llm-only", f"model.dtype={dtype}").stages["llm"]
        request = stage.memory.request
        assert request.dtype == dtype and request.adapter_dtype == stage.precision.adapters
        counts[dtype] = stage.memory.estimate.weights
    assert counts["bfloat16"] < 0.6 * counts["float32"]


def test_the_planned_precision_enters_the_key() -> None:
    """What each part is held in decides the weights a QLoRA stage trains to."""
    float32 = plan("recipe=r1-llm-only").stages["llm"]
    bfloat16 = plan("recipe=r1-llm-only", BF16).stages["llm"]
    assert float32.fingerprint.startswith("06b1fb3a1a06")  # r1's QLoRA stage, key version 2
    assert bfloat16.fingerprint != float32.fingerprint
