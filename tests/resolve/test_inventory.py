"""`resolve.inventory`: a model's parameters and modules as plain data, what the policies
decide on. Read from a torch model (meta device or loaded), kept as JSON, imported without
torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import peft
import pytest
import torch
import transformers as tf
from tiny_configs import TEXT, tiny_model

from recipe_engine.config.schema import ModelConfig
from recipe_engine.resolve.inventory import (
    ADAPTABLE,
    LINEAR,
    OTHER,
    ModelInventory,
    inventory_of,
    meta_inventory,
    model_inventory,
)

GPT2 = dict(n_embd=32, n_layer=1, n_head=2, n_positions=64, vocab_size=128)


def gpt2(device: str = "meta") -> tf.GPT2LMHeadModel:
    with torch.device(device):
        return tf.GPT2LMHeadModel(tf.GPT2Config(**GPT2))


def test_the_inventory_survives_a_json_round_trip() -> None:
    inventory = inventory_of(tiny_model("qwen2_vl", device="meta"))
    text = json.dumps(inventory.to_dict())
    assert ModelInventory.from_dict(json.loads(text)) == inventory
    assert inventory.model_type == "qwen2_vl"


def test_tied_weights_are_listed_under_both_names_as_one_tensor() -> None:
    model = tiny_model("llama", device="meta", tie=True)
    inventory = inventory_of(model)
    tensors = {p.name: p.tensor for p in inventory.parameters}
    assert tensors["lm_head.weight"] == tensors["model.embed_tokens.weight"]
    assert inventory.parameter_names() == [
        n for n, _ in model.named_parameters(remove_duplicate=False)
    ]
    assert len(set(tensors.values())) == len(list(model.parameters()))
    untied = {p.name: p.tensor for p in inventory_of(tiny_model("llama", device="meta")).parameters}
    assert untied["lm_head.weight"] != untied["model.embed_tokens.weight"]


def test_module_kinds_and_features() -> None:
    inventory = inventory_of(tiny_model("llama", device="meta"))
    proj = inventory.module("model.layers.0.mlp.up_proj")
    assert (proj.kind, proj.class_name) == (LINEAR, "Linear")
    assert (proj.in_features, proj.out_features, proj.weight_numel) == (32, 64, 32 * 64)
    embed = inventory.module("model.embed_tokens")
    assert (embed.kind, embed.in_features, embed.out_features) == (ADAPTABLE, 128, 32)
    assert inventory.module("model.norm").kind == OTHER
    assert "" not in inventory.module_names()  # the root module is left out
    assert inventory.names_of(LINEAR)[-1] == "lm_head"


def test_gpt2_conv1d_counts_as_linear_with_its_weight_shape() -> None:
    inventory = inventory_of(gpt2())
    attn = inventory.module("transformer.h.0.attn.c_attn")
    assert (attn.kind, attn.class_name) == (LINEAR, "Conv1D")
    assert (attn.in_features, attn.out_features) == (32, 96)  # Conv1D's weight is (in, out)
    assert "transformer.h.0.mlp.c_fc" in inventory.names_of(LINEAR)
    assert inventory.module("transformer.wte").kind == ADAPTABLE


def test_features_are_what_lora_builds_its_matrices_from() -> None:
    """r x (in + out) per adapted module, the planner's LoRA count, is what peft creates."""
    model = gpt2("cpu")
    inventory = inventory_of(model)
    targets = ["transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_proj", "transformer.wte"]
    config = peft.LoraConfig(r=4, target_modules=targets, fan_in_fan_out=True)
    adapted = peft.get_peft_model(model, config)
    created = sum(p.numel() for n, p in adapted.named_parameters() if "lora_" in n)
    modules = [inventory.module(t) for t in targets]
    assert created == sum(4 * (m.in_features + m.out_features) for m in modules)


def test_bitsandbytes_layers_are_linear() -> None:
    bnb = pytest.importorskip("bitsandbytes")
    model = tiny_model("llama", device="meta")
    with torch.device("meta"):
        model.model.layers[0].mlp.up_proj = bnb.nn.Linear4bit(32, 64)
        model.model.layers[0].mlp.down_proj = bnb.nn.Linear8bitLt(64, 32)
    inventory = inventory_of(model)
    for name, cls in (("up_proj", "Linear4bit"), ("down_proj", "Linear8bitLt")):
        module = inventory.module(f"model.layers.0.mlp.{name}")
        assert (module.kind, module.class_name) == (LINEAR, cls)


def test_meta_inventory_is_the_models_own() -> None:
    config = tf.LlamaConfig(**TEXT)
    assert meta_inventory(config, "causal_lm") == inventory_of(tiny_model("llama", device="meta"))


def test_model_inventory_reads_a_folders_config(tmp_path: Path) -> None:
    tf.LlamaConfig(**TEXT).save_pretrained(tmp_path)
    entry = ModelConfig(name="tiny", source="local", id=str(tmp_path), kind="causal_lm")
    found = model_inventory(entry, str(tmp_path))
    assert found == inventory_of(tiny_model("llama", device="meta"))


def test_importing_the_inventory_loads_neither_torch_nor_transformers() -> None:
    script = (
        "import sys, recipe_engine.resolve.inventory\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_unknown_module_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no module 'model.nothing'"):
        inventory_of(tiny_model("llama", device="meta")).module("model.nothing")
