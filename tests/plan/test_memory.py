"""The memory estimate: arithmetic on plain data (milliseconds, no torch), the shipped
config snapshots, and the write-ups' measured figures beside the plan's estimates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from recipe_engine.capabilities import FrozenModel
from recipe_engine.plan.memory import (
    GIB,
    NF4_DOUBLE_QUANT_BYTES,
    ORPO_LOGITS,
    MemoryRequest,
    Sharding,
    estimate_memory,
    optimizer_states,
)
from recipe_engine.plan.memory_fit import describe_memory, fit_advice
from recipe_engine.plan.model_shape import model_shape
from recipe_engine.plan.trainer_settings import ZeroSettings, deepspeed_settings, zero_settings
from recipe_engine.resolve.resolver import SNAPSHOTS, snapshot_folder

# A 7B-class decoder (Qwen2-VL-7B's language model) without a vision tower.
CONFIG = {
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "num_attention_heads": 28,
}
SHAPE = model_shape(CONFIG)
COUNTS = {"embeddings": 545_000_000, "language_model": 6_530_000_000, "lm_head": 545_000_000}


def request(**changes: object) -> MemoryRequest:
    base = MemoryRequest(
        shape=SHAPE,
        param_counts=COUNTS,
        dtype="bfloat16",
        accelerated=True,
        batch=2,
        text_tokens=512,
    )
    return dataclasses.replace(base, **changes)


def test_frozen_bf16_model_is_weights_at_two_bytes_and_no_state() -> None:
    estimate = estimate_memory(request())
    assert estimate.weights == pytest.approx(sum(COUNTS.values()) * 2 / GIB)
    assert estimate.optimizer == 0 and estimate.gradients == 0 and estimate.activations == 0


def test_full_fine_tune_adds_gradients_and_two_adamw_states_at_the_parameter_width() -> None:
    estimate = estimate_memory(request(trained=("language_model",), batch=1, text_tokens=8))
    trained = COUNTS["language_model"]
    assert estimate.optimizer == pytest.approx(trained * 2 * 2 / GIB)
    assert estimate.phase == "optimizer step"  # tiny batch: gradients outweigh activations
    assert estimate.gradients == pytest.approx(trained * 2 / GIB)


@pytest.mark.parametrize(
    ("optim", "expected"),
    [
        ("adamw_torch_fused", ("param", 2)),
        ("sgd", ("param", 0)),
        ("adamw_8bit", ("bytes", 2)),
        ("paged_adamw_8bit", ("bytes", 2)),
        ("adafactor", ("param", 0)),
        ("lion_8bit", ("bytes", 1)),
    ],
)
def test_optimizer_state_per_parameter(optim: str, expected: tuple[str, int]) -> None:
    assert optimizer_states(optim) == expected


def test_4bit_double_quant_weights_and_the_rest_at_the_stages_width() -> None:
    """No float32 upcast of the unquantized weights (`plan.precision`); LoRA in the plan's
    adapter dtype (bf16 under a bf16 k-bit base)."""
    quantized = COUNTS["language_model"]
    estimate = estimate_memory(
        request(
            bits="4bit",
            double_quant=True,
            quantized_components=("language_model",),
            quantized_params=quantized,
            lora_components=("language_model",),
            lora_params=10**7,
            adapter_dtype="bfloat16",
        )
    )
    rest = COUNTS["embeddings"] + COUNTS["lm_head"]
    assert estimate.weights == pytest.approx((quantized * NF4_DOUBLE_QUANT_BYTES + rest * 2) / GIB)
    assert estimate.lora == pytest.approx(10**7 * 2 / GIB)


def test_activations_grow_with_batch_and_sequence_and_shrink_with_checkpointing() -> None:
    lora = {"lora_components": ("language_model",), "lora_params": 10**7}
    small = estimate_memory(request(**lora, batch=2, text_tokens=128)).activations
    assert estimate_memory(request(**lora, batch=8, text_tokens=128)).activations == pytest.approx(
        4 * small
    )
    assert estimate_memory(request(**lora, batch=2, text_tokens=512)).activations == pytest.approx(
        4 * small
    )
    checkpointed = estimate_memory(request(**lora, gradient_checkpointing=True)).activations
    assert checkpointed < estimate_memory(request(**lora)).activations / 5


def test_logits_are_trls_fused_head_tile_not_batch_by_sequence_by_vocabulary() -> None:
    """TRL's fused LM head projects onto one 32768-wide tile of at most 4096 tokens; the
    backward pass adds fp32 gradients of the hidden states (and of a trained lm_head)."""
    lora = {"lora_components": ("language_model",), "lora_params": 1}
    tokens, hidden, vocab = 2 * 512, 3584, 152064
    tile_and_grad = tokens * 32768 * 2 + tokens * hidden * 4
    assert estimate_memory(request(**lora)).logits == pytest.approx(tile_and_grad / GIB)
    trained_head = estimate_memory(request(**lora, trained=("lm_head",))).logits
    assert trained_head == pytest.approx((tile_and_grad + vocab * hidden * 4) / GIB)
    long = estimate_memory(request(**lora, batch=16)).logits  # 8192 tokens: the tile stops at 4096
    assert long == pytest.approx((4096 * 32768 * 2 + 8192 * hidden * 4) / GIB)
    on_cpu = estimate_memory(request(**lora, accelerated=False, dtype="float32")).logits
    element_wise = 29 * tokens * 32768  # torch's fold of the tile (no Triton): 7 fp32 + 1 bool
    assert on_cpu == pytest.approx((tokens * 32768 * 4 + element_wise + tokens * hidden * 4) / GIB)


def test_sharding_splits_state_per_device() -> None:
    full = request(trained=("language_model",), batch=1, text_tokens=8)
    single = estimate_memory(full)
    fsdp = estimate_memory(dataclasses.replace(full, sharding=Sharding("fsdp", 4)))
    ddp = estimate_memory(dataclasses.replace(full, sharding=Sharding("ddp", 4)))
    zero1 = estimate_memory(dataclasses.replace(full, sharding=Sharding("deepspeed", 4, 1)))
    assert fsdp.weights == pytest.approx(single.weights / 4)
    assert fsdp.optimizer == pytest.approx(single.optimizer / 4)
    assert ddp.peak == pytest.approx(single.peak)
    assert zero1.weights == pytest.approx(single.weights)
    assert zero1.optimizer == pytest.approx(single.optimizer / 4)


def test_advice_names_what_makes_it_fit() -> None:
    too_big = request(trained=("language_model",), batch=1, text_tokens=8)
    advice = fit_advice(too_big, capacity_gib=24)
    assert any("fsdp" in a for a in advice)
    busy = request(lora_components=("language_model",), lora_params=10**7, batch=16)
    assert any("per_device_train_batch_size" in a for a in fit_advice(busy, capacity_gib=30))


def test_qwen2_vl_image_tokens_follow_the_image_size_and_merge() -> None:
    config = json.loads((SNAPSHOTS / "Qwen--Qwen2-VL-7B-Instruct" / "config.json").read_text())
    processor = json.loads(
        (SNAPSHOTS / "Qwen--Qwen2-VL-7B-Instruct" / "preprocessor_config.json").read_text()
    )
    shape = model_shape(config, processor, [(448, 448)])
    assert shape.vision is not None
    assert shape.vision.patches_per_image == 32 * 32  # 448 / 14
    assert shape.vision.tokens_per_image == 16 * 16  # 2 x 2 patches merge into one token


@pytest.mark.parametrize(
    "entry",
    [
        "qwen2-vl-2b",
        "qwen2-vl-7b",
        "qwen2.5-vl-3b",
        "llava-1.5-7b",
        "tinyllama-1.1b",
        "qwen2.5-0.5b",
        "smollm2-135m-hub",
    ],
)
def test_snapshot_builds_to_the_entrys_parameter_count(entry: str) -> None:
    """Each shipped snapshot is the model it names: on the meta device it has the
    parameter count its model entry states (to 2%)."""
    import yaml

    from recipe_engine.config.compose import CONFIG_DIR
    from recipe_engine.resolve.models import meta_model

    transformers = pytest.importorskip("transformers")
    model = yaml.safe_load((CONFIG_DIR / "model" / f"{entry}.yaml").read_text())
    folder = snapshot_folder(model["id"])
    assert folder is not None
    config = transformers.AutoConfig.from_pretrained(str(folder))
    count = sum(p.numel() for p in meta_model(config, model["kind"]).parameters())
    assert count / 1e9 == pytest.approx(model["params_billion"], rel=0.02)


# The write-ups (shared/seeds/001, "VRAM Usage" and "Recipe Comparison Summary"): Qwen2-VL-7B
# on 2x RTX 6000 Ada (48 GB). r2 (bf16, vision tower fully trained, gradient checkpointing,
# device_map="balanced" over both GPUs): nvidia-smi showed 13,823 + 12,233 MiB = ~26 GB.
# r1 (4-bit, LoRA on the language model): "~16-20 GB".
SEED_R2_TOTAL_GB = (13823 + 12233) / 1024
SEED_R1_GB = (16, 20)


def _seed_plan(recipe: str, *extra: str):  # noqa: ANN202 - a RecipePlan
    from recipe_engine.config.compose import compose_config
    from recipe_engine.resolve.machine import Machine
    from recipe_engine.run.planning import plan_from_config

    overrides = [f"recipe={recipe}", "model=qwen2-vl-7b", "hardware=2x-rtx6000-ada", *extra]
    machine = Machine((), False, None, 1, 0, 0, "python")
    return plan_from_config(compose_config(overrides), machine)


def test_seed_write_ups_beside_the_estimates(capsys: pytest.CaptureFixture[str]) -> None:
    """Not an equality: the write-ups' batch, sequence and image sizes are not recorded, and
    nvidia-smi counts the CUDA context and the allocator's cache (reserved, not allocated).
    The estimate uses the shipped shapes data (84 px images, short rows), so its activations
    are smaller than the write-ups' photos would need; the weights and optimizer state, which
    the write-ups' totals are mostly made of, are the same."""
    r2 = _seed_plan(
        "r2-vision-only", "parallel=model_parallel", "stage.vision.gradient_checkpointing=true"
    ).stages["vision"]
    r1 = _seed_plan("r1-llm-only").stages["llm"]
    assert r2.memory is not None and r1.memory is not None
    r2_total = r2.memory.estimate.peak * r2.memory.estimate.devices
    r1_peak = r1.memory.estimate.peak
    with capsys.disabled():
        print(f"\nr2-vision-only: estimate {r2.memory.describe()}")
        print(f"  both GPUs together ~{r2_total:.1f} GiB; write-up measured {SEED_R2_TOTAL_GB:.1f}")
        print(
            f"r1-llm-only: estimate {r1.memory.describe()}; "
            f"write-up {SEED_R1_GB[0]}-{SEED_R1_GB[1]} GB"
        )
    # Within 25% of what the write-ups measured (their batch and images are unknown).
    assert r2_total == pytest.approx(SEED_R2_TOTAL_GB, rel=0.25)
    assert SEED_R1_GB[0] * 0.75 <= r1_peak <= SEED_R1_GB[1] * 1.25


def test_a_cuda_peak_is_what_the_allocator_holds_and_the_context_comes_off_the_card():
    """Measured on an H100 (docs/gpu/): `max_memory_allocated` holds the tensors and cuBLAS's
    workspace, not the CUDA context; the estimate compares like with like and the fit takes
    the context off the card instead."""
    from plans import plan

    from recipe_engine.plan.memory import CUDA_CONTEXT_GIB, CUDA_WORKSPACE_GIB

    memory = plan("recipe=r1-llm-only", "hardware=1x-rtx4090", "gpus=0").stages["llm"].memory
    assert memory.estimate.overhead == CUDA_WORKSPACE_GIB
    assert memory.capacity_gib == pytest.approx(24.0 - CUDA_CONTEXT_GIB)
    assert memory.fits and "cuda:0" in memory.describe()


# --------------------------------------------------------------------------- trainers

LORA = {"lora_components": ("language_model",), "lora_params": 10**7}
# A full fine-tune's reference: a copy of its starting weights, stored and sharded alike.
COPY = FrozenModel("reference model", 0, same_storage=True)
FULL = {"trained": ("embeddings", "language_model", "lm_head")}


def test_sft_estimates_are_unchanged_by_the_trainer_fields() -> None:
    """The peaks (GiB) these SFT requests had before `sequences_per_row`, frozen models beside
    the policy and `fused_head` existed, to the last bit: an SFT stage's defaults change
    nothing."""
    before = [
        (request(), 14.269527912139893),
        (request(trained=("language_model",), batch=1, text_tokens=8), 50.68257451057434),
        (request(**LORA, batch=16), 56.559882164001465),
        (
            request(
                trained=("language_model", "lm_head"),
                accelerated=False,
                dtype="float32",
                gradient_checkpointing=True,
                optim="adamw_torch",
            ),
            133.81242752075195,
        ),
        (request(**LORA, attention="eager", sharding=Sharding("fsdp", 4)), 11.214189291000366),
    ]
    for sft, peak in before:
        estimate = estimate_memory(sft)
        assert estimate.peak == peak
        assert estimate.of(COPY.label) == 0 and "reference model" not in dict(estimate.parts())


def test_dpo_lora_adds_no_reference_and_doubles_the_sequences() -> None:
    """Chosen and rejected run as one batch of 2 x batch sequences; the reference of a LoRA
    policy is the adapter-disabled base: no second copy of any weight."""
    sft = estimate_memory(request(**LORA))
    dpo = estimate_memory(request(**LORA, sequences_per_row=2))
    as_double_batch = estimate_memory(request(**LORA, batch=4))
    assert dpo.of(COPY.label) == 0
    assert dpo.weights == sft.weights and dpo.lora == sft.lora and dpo.optimizer == sft.optimizer
    assert dpo.activations == pytest.approx(2 * sft.activations)
    assert dpo.logits == as_double_batch.logits  # the same fused LM head as SFT, on 2x tokens
    assert dpo.peak == pytest.approx(as_double_batch.peak)


def test_dpo_full_fine_tune_adds_exactly_one_frozen_copy_of_the_weights() -> None:
    full = request(**FULL, batch=1, text_tokens=64)
    sft = estimate_memory(dataclasses.replace(full, sequences_per_row=2))
    dpo = estimate_memory(dataclasses.replace(full, sequences_per_row=2, frozen=(COPY,)))
    assert dpo.of(COPY.label) == pytest.approx(sum(COUNTS.values()) * 2 / GIB)  # bf16, no states
    assert dpo.of(COPY.label) == pytest.approx(sft.weights)
    assert dpo.peak == pytest.approx(sft.peak + sft.weights)
    assert ("reference model", dpo.of(COPY.label)) in dpo.parts()
    assert "reference model" in describe_memory(dpo, "cuda:0", 80)


def test_the_reference_copy_is_sharded_like_the_weights() -> None:
    dpo = request(**FULL, batch=1, text_tokens=8, sequences_per_row=2, frozen=(COPY,))
    single = estimate_memory(dpo).of(COPY.label)
    for sharding, share in [
        (Sharding("fsdp", 4), single / 4),
        (Sharding("deepspeed", 4, 3), single / 4),
        (Sharding("deepspeed", 4, 2), single),
        (Sharding("ddp", 4), single),
    ]:
        shared = estimate_memory(dataclasses.replace(dpo, sharding=sharding))
        assert shared.of(COPY.label) == pytest.approx(share)


def test_another_frozen_model_is_its_parameters_whole_on_each_device() -> None:
    """A teacher: its parameters at the stage's width, not sharded with the policy."""
    teacher = FrozenModel("teacher model", 10**8)
    lora = request(**LORA, dtype="float32", frozen=(teacher,))
    assert estimate_memory(lora).of("teacher model") == pytest.approx(10**8 * 4 / GIB)
    sharded = dataclasses.replace(lora, sharding=Sharding("fsdp", 4))
    assert estimate_memory(sharded).of("teacher model") == pytest.approx(10**8 * 4 / GIB)


@pytest.mark.parametrize(
    ("zero", "half_precision", "expected"),
    [
        ({"stage": 2}, True, ZeroSettings(2, 500_000_000, buckets=1, width=2)),
        ({"stage": 2, "overlap_comm": True}, True, ZeroSettings(2, 500_000_000, 2, 2)),
        ({"stage": 3}, True, ZeroSettings(3, 500_000_000, 1, 2)),  # one, overlap or not
        ({"stage": 2}, False, ZeroSettings(2, 500_000_000, 1, 4)),
        ({"stage": 2, "reduce_bucket_size": 2e8}, True, ZeroSettings(2, 200_000_000, 1, 2)),
        ({"stage": 2, "reduce_bucket_size": "auto"}, True, ZeroSettings(2, None, 1, 2)),
        ({"stage": 2, "contiguous_gradients": False}, True, ZeroSettings(2, 500_000_000, 0, 2)),
    ],
)
def test_deepspeeds_buckets_follow_its_config_and_defaults(zero, half_precision, expected):
    config = deepspeed_settings({"zero_optimization": zero})  # bf16 "auto": the Trainer's
    assert zero_settings(config, half_precision) == expected


def test_deepspeed_on_an_h200_held_its_gradient_bucket_beside_a_tiny_model() -> None:
    """Measured 2026-11-27 on an H200 (docs/gpu/2026-11-27.md): r1-llm-only under ZeRO-2
    peaked at 1,023.6 MiB, r2-vision-only under ZeRO-3 at 1,029.5 MiB; the estimates without
    DeepSpeed's 5e8-element bf16 bucket were 77.2 and 79.0 MiB."""
    from plans import plan

    for recipe, measured_mib, extra in [
        ("r1-llm-only", 1023.6, ()),
        ("r2-vision-only", 1029.5, ("++stage.vision.train.deepspeed.zero_optimization.stage=3",)),
    ]:
        stages = plan(f"recipe={recipe}", "parallel=deepspeed", "hardware=1x-rtx4090", "gpus=0",
                      *extra).stages  # fmt: skip
        (memory,) = (stage.memory for stage in stages.values() if stage.memory)
        assert memory.estimate.buckets == pytest.approx(500_000_000 * 2 / GIB)
        assert memory.estimate.peak * 1024 == pytest.approx(measured_mib, rel=0.15)


def test_orpo_has_no_reference_and_materializes_the_logits() -> None:
    """ORPO (trl.experimental) runs the plain forward: 2 x batch x tokens x vocab logits at
    the stage's width, ORPO_LOGITS of them at the top of the backward pass."""
    orpo = estimate_memory(request(**LORA, sequences_per_row=2, fused_head=False))
    dpo = estimate_memory(request(**LORA, sequences_per_row=2))
    assert orpo.of(COPY.label) == 0
    assert orpo.activations == pytest.approx(dpo.activations)
    logits = 2 * 2 * 512 * 152064 * 2  # sequences x tokens x vocab x bf16
    assert orpo.logits == pytest.approx(ORPO_LOGITS * logits / GIB)
    assert orpo.logits > dpo.logits


def test_advice_for_a_dpo_full_fine_tune_names_the_reference_and_its_fixes() -> None:
    dpo = request(
        **FULL, batch=1, text_tokens=64, sequences_per_row=2, frozen=(COPY,), stage="pref"
    )
    estimate = estimate_memory(dpo)
    capacity = estimate.peak - estimate.of(COPY.label) / 2  # fits once the copy is gone
    advice = fit_advice(dpo, capacity)
    lora = [a for a in advice if "stage.pref.lora" in a]
    assert lora and "adapter-disabled base" in lora[0] and "frozen copy" in lora[0]
    assert any("stage.pref.train.precompute_ref_log_probs=true" in a for a in advice)
    with_images = fit_advice(dataclasses.replace(dpo, images_per_row=1), capacity)
    assert not any("precompute_ref_log_probs" in a for a in with_images)  # TRL: text rows only
    no_copy = dataclasses.replace(dpo, frozen=())  # LoRA, precomputed, SFT
    assert not any("reference" in a for a in fit_advice(no_copy, capacity))


def test_stage_memory_reads_the_trainer_and_the_policy() -> None:
    """`stage.<name>.trainer` sets the pair's two sequences and ORPO's logits; the frozen
    models its capabilities hold (DPO's copy for a full fine-tune) come in as planned:
    tests/capabilities/test_reference.py."""
    from recipe_engine.config.schema import StageConfig
    from recipe_engine.plan.memory_inputs import MemoryInputs, stage_memory
    from recipe_engine.plan.recipe_plan import AdapterPlan, PolicyPlan
    from recipe_engine.resolve.inputs import LongestRow, ModelFiles

    lengths = LongestRow(chars=400, messages=3, images=0)
    adapter = AdapterPlan(["language_model"], [], {})

    def memory(trainer: str, lora: bool = False, **train: object) -> MemoryRequest:
        stage = StageConfig(trainer=trainer, dtype="bfloat16", train=dict(train))
        policy = PolicyPlan(
            None, [], [], [] if lora else ["language_model"], False, adapter if lora else None
        )
        policy.param_counts = COUNTS
        inputs = MemoryInputs(stage, "causal_lm", ModelFiles(CONFIG, {}), policy, lengths)
        found = stage_memory(dataclasses.replace(inputs, name="pref"))
        assert found is not None
        return found.request

    sft, dpo, orpo = memory("sft"), memory("dpo"), memory("orpo")
    assert (sft.sequences_per_row, sft.fused_head) == (1, True)
    assert (dpo.sequences_per_row, dpo.fused_head) == (2, True)
    assert (orpo.sequences_per_row, orpo.fused_head) == (2, False)
    assert dpo.stage == "pref"
    # `resolve` counts a pair's longest row as one sequence (prompt and the longer answer):
    # the same lengths, the same tokens per sequence; twice the sequences.
    assert dpo.text_tokens == sft.text_tokens


def test_the_longest_rows_tokens_are_its_tokenizers_count_and_its_templates_where_at_hand():
    """resolve counts the row's text with the model's tokenizer and measures what the chat
    template adds; without them, four characters a token and five a message are guessed."""
    from recipe_engine.config.schema import StageConfig
    from recipe_engine.plan.memory_inputs import MemoryInputs, stage_memory
    from recipe_engine.plan.recipe_plan import PolicyPlan
    from recipe_engine.resolve.inputs import LongestRow, ModelFiles, SavedTokenizer, TemplateTokens

    policy = PolicyPlan(None, [], [], ["language_model"], False, None)
    policy.param_counts = COUNTS
    lengths = LongestRow(chars=400, messages=2, sample="x" * 400)
    template = TemplateTokens(fixed=12, per_message=5)

    def tokens(files: ModelFiles, counted: int | None) -> int:
        stage = StageConfig(dtype="bfloat16", train={"max_length": 4096})
        inputs = MemoryInputs(stage, "causal_lm", files, policy, lengths, longest_tokens=counted)
        found = stage_memory(inputs)
        assert found is not None
        return found.request.text_tokens

    assert tokens(ModelFiles(CONFIG, {}), None) == 400 // 4 + 5 * 2  # guessed
    saved = SavedTokenizer("tok", {})
    assert tokens(ModelFiles(CONFIG, {}, template, saved), 180) == 180 + 12 + 5 * 2  # measured
