"""The planned precision made true of a real k-bit model, checked, and kept while generating."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as tf
from policy_steps import apply_lora, bnb_config, linear_names
from tiny_configs import tiny_model

from recipe_engine.plan.precision import decide_precision, k_bit_storage
from recipe_engine.run import precision
from recipe_engine.run.census import census
from recipe_engine.run.policies import apply_freeze

FOUR_BIT = {
    "load_in_4bit": True,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_compute_dtype": "bfloat16",
}
FROZEN = ["vision_tower", "projector", "embeddings"]
IDS = torch.tensor([[5, 6, 7, 8]])
PLAN = decide_precision(
    "bfloat16", quantized=k_bit_storage("4bit", FOUR_BIT), lora=True, trainer={}
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen2_vl")
    tiny_model("qwen2_vl").to(torch.bfloat16).save_pretrained(path)
    return path


@pytest.fixture()
def qlora(saved: Path):
    """r1's llm stage on a tiny bf16 Qwen2-VL: 4-bit language model, LoRA on it, lm_head
    trained in full (PEFT's modules_to_save), the rest frozen."""
    names = linear_names(tiny_model("qwen2_vl", device="meta"))
    config = bnb_config(FOUR_BIT, layout="qwen2_vl", module_names=names, trained=["lm_head"])
    model = tf.Qwen2VLForConditionalGeneration.from_pretrained(
        saved, quantization_config=config, device_map={"": "cpu"}, dtype=torch.bfloat16
    )
    apply_freeze(model, layout="qwen2_vl", components=FROZEN, patterns=[])
    adapted = apply_lora(model, layout="qwen2_vl", lora={"r": 4}, frozen=FROZEN)
    # Generated in train mode, as the stage's preflight does: in eval mode bitsandbytes
    # repacks 4-bit weights for its CPU inference kernel, whose blocks are wider than this
    # model's 32-wide layers.
    return adapted.train()


def test_held_in_the_planned_dtypes_a_qlora_model_generates(qlora) -> None:
    """PEFT left the adapters in float32; held, every unquantized weight and adapter is bf16
    (nothing upcast), the check passes, and generation runs without autocast."""
    assert precision.hold(qlora, PLAN) > 0
    precision.check(qlora, PLAN, "llm")
    dtypes = {c: set(cell.dtype) for c, cell in census(qlora, layout="qwen2_vl").items()}
    for component in ("vision_tower", "projector", "embeddings", "lm_head"):
        assert dtypes[component] == {"torch.bfloat16"}, component
    assert "torch.uint8" in dtypes["language_model"]
    out = qlora.generate(input_ids=IDS, max_new_tokens=2, do_sample=False)
    assert out.shape == (1, 6)


def test_what_the_float32_upcast_did_fails_generation_and_the_check_names_it(qlora) -> None:
    """The libraries' mix (FIELD-NOTES.md, section 10): the unquantized weights in float32,
    the trained lm_head in bf16. Generation dies on the dtype; the guard stops it first."""
    precision.hold(qlora, PLAN)
    for name, param in qlora.named_parameters():
        if param.is_floating_point() and "lm_head" not in name and ".lora_" not in name:
            param.data = param.data.float()
    with pytest.raises(RuntimeError, match="dtype"):
        qlora.generate(input_ids=IDS, max_new_tokens=2)
    with pytest.raises(precision.PrecisionViolation, match="is float32, planned bfloat16"):
        precision.check(qlora, PLAN, "llm")


def test_trls_cast_of_a_k_bit_models_trainables_is_undone_for_a_float32_stage(saved) -> None:
    """TRL casts a k-bit model's trainable weights to bf16 whatever the stage's dtype."""
    plan = decide_precision(
        "float32",
        quantized=k_bit_storage("4bit", FOUR_BIT),
        lora=True,
        trainer={},
    )
    model = tiny_model("qwen2_vl")
    for name, param in model.named_parameters():
        if "lm_head" in name:
            param.data = param.data.to(torch.bfloat16)  # as TRL leaves it
    assert precision.hold(model, plan) == 1
    precision.check(model, plan, "llm")


def test_the_engines_forwards_autocast_where_the_trainer_does() -> None:
    mixed = decide_precision("float32", quantized=None, lora=False, trainer={"bf16": True})
    with precision.forwards(mixed, "cpu"):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    with precision.forwards(PLAN, "cpu"):
        assert not torch.is_autocast_enabled("cpu")
