"""Packing, padding-free, Liger's kernels and gradient checkpointing as the plan decides them:
pure decisions on hand-written inputs (no torch)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import transformers

from recipe_engine.errors import RecipeError
from recipe_engine.plan.kernels import checkpointing_needed, decide_liger
from recipe_engine.plan.memory import MemoryRequest, estimate_memory
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.model_shape import model_shape
from recipe_engine.plan.packing import (
    MASKS_FROM_POSITIONS,
    PackingFacts,
    attention_implementation,
    decide_packing,
    flattens_rows,
)
from recipe_engine.resolve.resolver import snapshot_folder
from recipe_engine.trainers import TRAINERS

FACTS = PackingFacts("llm", TRAINERS["sft"], "qwen2", "sdpa", image_rows=False)
PACKED = {"packing": True, "max_length": 128, "per_device_train_batch_size": 4}


def test_unset_options_leave_the_stage_as_it_was() -> None:
    train = {"learning_rate": 1e-3}
    choice = decide_packing(train, FACTS)
    assert choice.train is train and choice.notes == [] and choice.tokens_note(1) == []


def test_bfd_packing_on_sdpa_keeps_rows_apart_and_says_the_tokens_a_step() -> None:
    choice = decide_packing({**PACKED, "gradient_accumulation_steps": 2}, FACTS)
    assert choice.train["packing"] is True
    [note] = choice.tokens_note(world_size=2)
    assert "mask transformers builds from position_ids (qwen2)" in note
    assert "up to 2048 tokens a step (4 x 128 x 2 accumulation x 2 device(s))" in note


def test_flash_attention_keeps_rows_apart_on_any_model() -> None:
    facts = dataclasses.replace(FACTS, model_type="gpt2", attention="flash_attention_2")
    assert "cu_seq_lens" in decide_packing(PACKED, facts).kept_apart_by


def test_a_model_whose_mask_ignores_position_ids_is_refused_with_the_fix() -> None:
    facts = dataclasses.replace(FACTS, model_type="gpt2")
    with pytest.raises(RecipeError, match="attend to each other") as refusal:
        decide_packing(PACKED, facts)
    assert refusal.value.key == "stage.llm.train.packing"
    assert "flash_attention_2" in str(refusal.value)


@pytest.mark.parametrize(
    ("train", "key"),
    [
        ({**PACKED, "packing_strategy": "wrapped"}, "stage.llm.train.packing_strategy"),
        ({"packing": True, "max_length": None}, "stage.llm.train.max_length"),
        ({"padding_free": True}, "stage.llm.train.padding_free"),  # max_length 1024
    ],
)
def test_what_trl_refuses_or_lets_rows_mix_is_refused_in_the_plan(train: dict, key: str) -> None:
    with pytest.raises(RecipeError) as refusal:
        decide_packing(train, FACTS)
    assert refusal.value.key == key


def test_padding_free_without_a_length_runs_and_counts_rows() -> None:
    choice = decide_packing({"padding_free": True, "max_length": None}, FACTS)
    assert "8 rows a step" in choice.tokens_note(1)[0]


def test_image_rows_are_refused() -> None:
    with pytest.raises(RecipeError, match="image rows"):
        decide_packing(PACKED, dataclasses.replace(FACTS, image_rows=True))


def test_dpo_padding_free_falls_back_and_leaves_the_key_as_without() -> None:
    choice = decide_packing(
        {"padding_free": True, "beta": 0.1}, dataclasses.replace(FACTS, trainer=TRAINERS["dpo"])
    )
    assert choice.train == {"beta": 0.1}
    assert "DPOTrainer pads" in choice.notes[0]


def test_an_unreadable_model_config_falls_back_to_unpacked_with_the_reason() -> None:
    choice = decide_packing(PACKED, dataclasses.replace(FACTS, model_type=None))
    assert "packing" not in choice.train and "cannot be checked" in choice.notes[0]


def test_attention_and_flattening_as_trl_and_transformers_read_them() -> None:
    assert attention_implementation({"model_type": "llama"}) == "sdpa"
    assert attention_implementation({"_attn_implementation": "eager"}) == "eager"
    assert flattens_rows({"packing": True})  # bfd turns padding-free on
    assert not flattens_rows({"packing": True, "packing_strategy": "wrapped"})


def test_every_listed_model_builds_its_mask_from_position_ids() -> None:
    """The list against the installed transformers: each model's decoder passes position_ids
    to masking_utils' mask factories, which detect packed rows from them."""
    models = Path(transformers.__file__).parent / "models"
    call = re.compile(
        r"(create_causal_mask|create_sliding_window_causal_mask|mask_function)\(|mask_kwargs = \{"
    )
    for model_type in MASKS_FROM_POSITIONS:
        folder = model_type.removesuffix("_text")
        source = (models / folder / f"modeling_{folder}.py").read_text()
        assert "masking_utils import" in source, model_type
        lines = source.splitlines()
        calls = [i for i, line in enumerate(lines) if call.search(line)]
        assert any("position_ids" in "".join(lines[i : i + 12]) for i in calls), model_type


# --------------------------------------------------------------------------- Liger


def test_liger_is_skipped_off_cuda_and_the_key_is_dropped() -> None:
    choice = decide_liger({"use_liger_kernel": True, "seed": 1}, "cpu", "llama")
    assert choice.train == {"seed": 1} and not choice.liger
    assert "CUDA" in choice.notes[0]


def test_liger_is_skipped_for_a_family_it_does_not_patch() -> None:
    choice = decide_liger({"use_liger_kernel": True}, "cuda", "gpt2")
    assert choice.train == {} and "`gpt2`" in choice.notes[0]


def test_liger_is_passed_on_cuda_for_a_supported_family() -> None:
    choice = decide_liger({"use_liger_kernel": True}, "cuda", "qwen2")
    assert choice.train == {"use_liger_kernel": True} and choice.liger


# --------------------------------------------------------------------------- memory

SHAPE = model_shape(
    {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "intermediate_size": 8192,
        "vocab_size": 32000,
        "num_attention_heads": 16,
    }
)
FULL = MemoryRequest(
    shape=SHAPE,
    param_counts={"language_model": 1_500_000_000},
    trained=("language_model",),
    dtype="bfloat16",
    accelerated=True,
    batch=8,
    text_tokens=1024,
)


def test_liger_shrinks_the_saved_mlp_activations() -> None:
    plain = estimate_memory(FULL).activations
    assert estimate_memory(dataclasses.replace(FULL, liger=True)).activations < plain


def test_padding_free_on_sdpa_counts_the_mask_and_each_layers_additive_copy() -> None:
    """The boolean mask over the whole flattened sequence, once; and per layer the additive
    copy sdpa makes in the query's dtype and saves for the backward (torch's saved tensors):
    under gradient checkpointing one layer's, as layers are recomputed one at a time."""
    lora = dataclasses.replace(FULL, trained=(), lora_components=("language_model",))
    tokens, layers, bf16 = 8 * 1024, 24, 2
    for checkpointing, kept in ((False, layers), (True, 1)):
        plain = dataclasses.replace(lora, gradient_checkpointing=checkpointing)
        flat = dataclasses.replace(plain, padding_free=True)
        added = estimate_memory(flat).activations - estimate_memory(plain).activations
        assert added * 2**30 == pytest.approx(tokens**2 * (1 + kept * bf16))
    flash = dataclasses.replace(lora, padding_free=True, attention="flash_attention_2")
    assert estimate_memory(flash).activations == estimate_memory(lora).activations


def test_sdpa_keeps_a_float_copy_of_a_boolean_mask_for_its_backward() -> None:
    """What the estimate above counts, read from torch itself on this machine."""
    import torch
    import torch.nn.functional as F

    length, saved = 256, []
    q, k, v = (torch.randn(1, 2, length, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    square = [t for t in saved if t.shape[-2:] == (length, length)]
    assert [t.dtype for t in square] == [q.dtype]


def test_packed_smollm2_on_an_h200_is_within_the_memory_goal() -> None:
    """Measured 2026-11-27 on an H200 (docs/gpu/2026-11-27.md): SmolLM2-135M's full fine-tune,
    bf16, BFD-packed at 64 rows of 512 tokens under sdpa, peaked at 81,189 MiB; the estimate
    said 19.8 GiB before it counted each layer's additive mask."""
    smollm2 = model_shape(
        json.loads(
            (snapshot_folder("HuggingFaceTB/SmolLM2-135M-Instruct") / "config.json").read_text()
        )
    )
    packed = MemoryRequest(
        shape=smollm2,
        param_counts={"embeddings": 28_311_552, "language_model": 106_203_456},  # tied head
        trained=("embeddings", "language_model"),
        dtype="bfloat16",
        accelerated=True,
        batch=64,
        text_tokens=512,
        padding_free=True,
    )
    measured_gib = 81_189.4 / 1024
    assert estimate_memory(packed).peak == pytest.approx(measured_gib, rel=0.15)


def test_checkpointing_is_chosen_only_where_it_makes_the_stage_fit() -> None:
    peak = estimate_memory(FULL).peak
    checkpointed = estimate_memory(dataclasses.replace(FULL, gradient_checkpointing=True)).peak
    between = (peak + checkpointed) / 2

    def memory(capacity: float) -> StageMemory:
        return StageMemory(estimate_memory(FULL), "cuda:0", capacity, FULL)

    assert "does not fit cuda:0" in (checkpointing_needed(memory(between)) or "")
    assert checkpointing_needed(memory(peak + 1)) is None  # fits already
    assert checkpointing_needed(memory(checkpointed / 2)) is None  # would not help
    assert checkpointing_needed(None) is None


def test_a_model_that_names_flex_attention_is_refused_on_the_cpu(tmp_path):
    """torch has no flex_attention backward on the CPU: the stage is refused by `plan`, not
    at its preflight (seen with a scale model built with flex_attention for the GPU report)."""
    import shutil

    from plans import plan

    from recipe_engine.resolve.tiny import build_tiny_model

    folder = tmp_path / "tiny-qwen2-flex"
    shutil.copytree(build_tiny_model("tiny-qwen2"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "attn_implementation": "flex_attention"})
    )
    local = ("recipe=text-lora", "model.source=local", f"model.id={folder}", "model.kind=causal_lm")
    with pytest.raises(RecipeError, match="flex_attention") as refused:
        plan(*local)
    assert refused.value.key == "device" and "device=cuda" in str(refused.value)
    plan(*local, "hardware=1x-h100-80gb", "gpus=0")  # on a GPU it is planned
