"""Quantization policy: bitsandbytes 4/8-bit on the language model only, run on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers as tf
from policy_steps import apply_lora, bnb_config, linear_names
from tiny_configs import tiny_model

from recipe_engine.config.library_keys import validate_quantization
from recipe_engine.config.schema import FreezeConfig, ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import component_of
from recipe_engine.plan.policies.lora import plan_lora
from recipe_engine.plan.policies.quant import quantization_plan
from recipe_engine.plan.policy import decide_policy
from recipe_engine.resolve.inventory import inventory_of, quantized_modules
from recipe_engine.run import policies
from recipe_engine.run.census import census, trainable_report
from recipe_engine.run.policies import apply_freeze

bnb = pytest.importorskip("bitsandbytes")

FOUR_BIT = {
    "load_in_4bit": True,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_compute_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny bf16 checkpoints on disk, as a stage would hand them over."""
    out = {}
    for kind in ("qwen2_vl", "llama"):
        path = tmp_path_factory.mktemp(kind)
        tiny_model(kind).to(torch.bfloat16).save_pretrained(path)
        out[kind] = path
    return out


def load(kind: str, path: Path, quant: dict, layout: str) -> Any:
    cls = tf.Qwen2VLForConditionalGeneration if kind == "qwen2_vl" else tf.LlamaForCausalLM
    names = linear_names(tiny_model(kind, device="meta"))
    config = bnb_config(quant, layout=layout, module_names=names, trained=[])
    return cls.from_pretrained(
        path, quantization_config=config, device_map={"": "cpu"}, dtype=torch.bfloat16
    )


@pytest.mark.parametrize(
    ("quant", "match"),
    [
        ({"load_in_4bits": True}, "Did you mean `load_in_4bit`"),
        ({"load_in_4bit": True, "load_in_8bit": True}, "both"),
        ({"bnb_4bit_quant_type": "nf4"}, "load_in_4bit: true"),
        ({"load_in_8bit": True, "bnb_4bit_quant_type": "nf4"}, "no effect"),
        ({"load_in_4bit": True, "components": ["language_modle"]}, "Did you mean"),
        ({"load_in_4bit": True, "components": []}, "empty"),
        ({"load_in_4bit": True, "components": ["embeddings"]}, "linear"),
        ({"load_in_4bit": True, "on_unsupported": "fallback"}, "error, skip"),
        ({"load_in_4bit": True, "bnb_4bit_quant_type": "nf3"}, "nf4 or fp4"),
        ({"load_in_4bit": True, "bnb_4bit_compute_dtype": "bf16"}, "bfloat16"),
    ],
)
def test_validate_quantization_errors(quant: dict, match: str) -> None:
    with pytest.raises(RecipeError, match=match) as info:
        validate_quantization(quant)
    assert info.value.key and info.value.key.startswith("quantization")


def test_validate_quantization_ok() -> None:
    validate_quantization(dict(FOUR_BIT, components=["language_model"], on_unsupported="skip"))
    validate_quantization({"load_in_8bit": True, "llm_int8_threshold": 6.0})


def test_skip_modules_per_architecture() -> None:
    qwen = linear_names(tiny_model("qwen2_vl", device="meta"))
    config = bnb_config(FOUR_BIT, layout="qwen2_vl", module_names=qwen, trained=[])
    assert config.llm_int8_skip_modules == ["lm_head", "model.visual"]
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    llava = linear_names(tiny_model("llava", device="meta"))
    config = bnb_config(FOUR_BIT, layout="llava", module_names=llava, trained=[])
    assert config.llm_int8_skip_modules == [
        "lm_head",
        "model.multi_modal_projector",
        "model.vision_tower",
    ]
    # Quantizing the projector too keeps only the tower blocks (and lm_head) in full precision.
    quant = dict(
        FOUR_BIT, components=["language_model", "projector"], llm_int8_skip_modules=["down_proj"]
    )
    config = bnb_config(quant, layout="qwen2_vl", module_names=qwen, trained=[])
    assert config.llm_int8_skip_modules == ["down_proj", "lm_head", "model.visual.blocks"]


def test_quantizing_trained_component_errors() -> None:
    names = linear_names(tiny_model("llama", device="meta"))
    with pytest.raises(RecipeError, match="trains in full") as info:
        bnb_config(
            FOUR_BIT,
            layout="causal_lm",
            module_names=names,
            trained=["language_model", "lm_head"],
        )
    assert info.value.key == "quantization.components"
    with pytest.raises(RecipeError, match="does not have"):
        bnb_config(
            dict(FOUR_BIT, components=["vision_tower"]),
            layout="causal_lm",
            module_names=names,
            trained=[],
        )


def test_load_4bit_qwen2_vl(saved: dict[str, Path]) -> None:
    model = load("qwen2_vl", saved["qwen2_vl"], FOUR_BIT, "qwen2_vl")
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, module in linears.items():
        in_lm = component_of(name, "qwen2_vl") == "language_model"
        assert isinstance(module, bnb.nn.Linear4bit) == in_lm, name
    assert sorted(quantized_modules(model)) == sorted(
        n for n in linears if component_of(n, "qwen2_vl") == "language_model"
    )
    dtypes = {c: set(v.dtype) for c, v in census(model, layout="qwen2_vl").items()}
    assert "torch.uint8" in dtypes["language_model"]
    for comp in ("vision_tower", "projector", "lm_head", "embeddings"):
        assert dtypes[comp] == {"torch.bfloat16"}, comp
    # The report counts 4-bit weights unpacked: same totals as the bf16 model.
    reference = trainable_report(tiny_model("qwen2_vl"), layout="qwen2_vl")
    report = trainable_report(model, layout="qwen2_vl")
    assert report["language_model"].params == reference["language_model"].params


def test_load_8bit_llama(saved: dict[str, Path]) -> None:
    model = load("llama", saved["llama"], {"load_in_8bit": True}, "causal_lm")
    assert isinstance(model.model.layers[0].mlp.up_proj, bnb.nn.Linear8bitLt)
    assert type(model.lm_head) is torch.nn.Linear
    cells = census(model, layout="causal_lm")
    assert "torch.int8" in cells["language_model"].dtype
    assert cells["lm_head"].dtype == {"torch.bfloat16": 128 * 32}
    assert set(cells["language_model"].device) == {"cpu"}


def test_qlora_trains_on_cpu(saved: dict[str, Path]) -> None:
    model = load("qwen2_vl", saved["qwen2_vl"], FOUR_BIT, "qwen2_vl")
    frozen = ["vision_tower", "projector", "embeddings", "lm_head"]
    apply_freeze(model, layout="qwen2_vl", components=frozen, patterns=[])
    lora = {"r": 4, "lora_alpha": 8}
    plan = plan_lora(inventory_of(model), layout="qwen2_vl", lora=lora, frozen=frozen)
    assert plan.components == ["language_model"] and plan.modules_to_save == []
    peft_model = apply_lora(
        model, layout="qwen2_vl", lora=lora, frozen=frozen, gradient_checkpointing=True
    )
    ids = torch.tensor([[5, 6, 7, 8]])
    peft_model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in peft_model.named_parameters() if "lora_A" in n]
    assert len(grads) == 7 and all(g is not None for g in grads)
    report = trainable_report(peft_model, layout="qwen2_vl")
    assert report["vision_tower"].trainable == 0 and report["lm_head"].trainable == 0
    # No float32 upcast (peft.prepare_model_for_kbit_training is not used): the frozen
    # vision tower stays in the dtype it loaded in, as the stage's precision plan holds it.
    cells = census(peft_model, layout="qwen2_vl")
    assert set(cells["vision_tower"].dtype) == {"torch.bfloat16"}
    assert "torch.uint8" in cells["language_model"].dtype


def test_the_planned_counts_are_what_bitsandbytes_and_peft_make(saved: dict[str, Path]) -> None:
    """The policy decided on the meta inventory counts the weights the loaded model holds in
    4 bits and the parameters LoRA adds, on the model its own plan loads."""
    frozen = ["vision_tower", "projector", "embeddings", "lm_head"]
    stage = StageConfig(
        freeze=FreezeConfig(components=frozen), lora={"r": 4}, quantization=FOUR_BIT
    )
    entry = ModelConfig(name="tiny", source="local", id=str(saved["qwen2_vl"]), kind="vlm")
    inventory = inventory_of(tiny_model("qwen2_vl", device="meta"))
    policy = decide_policy("llm", stage, entry, inventory)
    assert policy.quantization is not None and policy.lora is not None
    model = tf.Qwen2VLForConditionalGeneration.from_pretrained(
        saved["qwen2_vl"],
        quantization_config=policies.bnb_config(policy.quantization),
        device_map={"": "cpu"},
        dtype=torch.bfloat16,
    )
    modules = dict(model.named_modules())
    quantized = [modules[n] for n in quantized_modules(model)]
    assert policy.quantized_params == sum(m.in_features * m.out_features for m in quantized) > 0
    apply_freeze(model, layout="qwen2_vl", components=frozen, patterns=[])
    adapted = policies.apply_lora(model, policy.lora, policies.Frozen("qwen2_vl", frozen))
    added = sum(p.numel() for n, p in adapted.named_parameters() if "lora_" in n)
    assert policy.lora_params == added


def test_a_skip_entry_that_keeps_no_layer_out_is_refused_with_the_full_name():
    """transformers matches skips from the start of a name or as a suffix: `vision_model`
    alone only matches the container, which bitsandbytes never replaces."""
    names = [n for n, _ in tiny_model("idefics3", device="meta").named_modules()]
    quant = {"load_in_4bit": True, "llm_int8_skip_modules": ["vision_model"]}
    with pytest.raises(RecipeError, match="Did you mean `model.vision_model`") as error:
        quantization_plan(quant, layout="idefics3", module_names=names, trained=[])
    assert error.value.key == "quantization.llm_int8_skip_modules"
    quant["llm_int8_skip_modules"] = ["model.vision_model"]
    planned = quantization_plan(quant, layout="idefics3", module_names=names, trained=[])
    assert "model.vision_model" in planned.config["llm_int8_skip_modules"]
