"""What the memory estimate needs, gathered for one stage: the model's config and processor
config (`resolve` reads them: the model's folder, the hub cache, or the snapshot shipped with
the engine), the policy's parameter counts, the trainer settings and the data's longest row.
`plan.memory` does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from recipe_engine.capabilities import FrozenModel
from recipe_engine.config.schema import StageConfig
from recipe_engine.plan.memory import (
    CUDA_CONTEXT_GIB,
    CUDA_WORKSPACE_GIB,
    MemoryRequest,
    Sharding,
    estimate_memory,
)
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.model_shape import ModelShape, model_shape
from recipe_engine.plan.packing import attention_implementation, flattens_rows
from recipe_engine.plan.placement import PlacementPlan
from recipe_engine.plan.recipe_plan import PolicyPlan
from recipe_engine.plan.trainer_settings import ZeroSettings
from recipe_engine.resolve.inputs import LongestRow, ModelFiles, TemplateTokens
from recipe_engine.trainers import AUTO, trainer_named

# SFTConfig's defaults for the keys the estimate reads (TRL 1.x / transformers 5.x).
DEFAULT_BATCH = 8
DEFAULT_MAX_LENGTH = 1024
DEFAULT_OPTIM = "adamw_torch_fused"
# Tokens from characters: English BPE averages about four characters a token. A chat template
# adds role markers around every message (measured with the model's tokenizer where it is at
# hand, resolve.template_tokens; else this guess).
CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS_PER_MESSAGE = 5


@dataclass(frozen=True)
class MemoryInputs:
    """One stage as the estimate sees it (`placement` None: single device, not placed yet)."""

    stage: StageConfig
    kind: str  # the model kind: vlm | causal_lm
    files: ModelFiles | None
    policy: PolicyPlan
    longest: LongestRow  # the longest training row (Rows.longest)
    placement: PlacementPlan | None = None
    capacity_gib: float | None = None
    zero: ZeroSettings | None = None  # a DeepSpeed stage's
    name: str = ""  # the stage's name, for the advice
    # The longest row's text in the model's tokenizer (StageInputs.longest_tokens); None:
    # guessed from its characters.
    longest_tokens: int | None = None
    # LoRA's dtype as the stage's precision plan decides it (plan.precision); the other
    # weights are in the stage's dtype.
    adapter_dtype: str = "float32"
    # Models the stage's capabilities hold frozen beside the policy (a reference copy, a
    # teacher).
    frozen: tuple[FrozenModel, ...] = ()


# --------------------------------------------------------------------------- the stage


def stage_memory(given: MemoryInputs) -> StageMemory | None:
    """The stage's estimate on the device its placement gives it, or None when neither the
    model's config nor a snapshot is at hand."""
    counts, stage, placement = given.policy.param_counts, given.stage, given.placement
    if given.files is None or counts is None:
        return None
    lengths = given.longest
    shape = model_shape(given.files.config, given.files.processor, lengths.image_sizes)
    text, assumed = _text_tokens(stage.train, lengths, given.kind, given.files.template,
                                 given.longest_tokens)  # fmt: skip
    device = placement.device if placement else "cuda"
    request = MemoryRequest(
        shape=shape,
        param_counts=counts,
        dtype=stage.dtype,
        adapter_dtype=given.adapter_dtype,
        accelerated=device != "cpu",
        batch=int(stage.train.get("per_device_train_batch_size", DEFAULT_BATCH)),
        text_tokens=text,
        images_per_row=lengths.images if shape.vision else 0,
        gradient_checkpointing=stage.gradient_checkpointing,
        optim=str(stage.train.get("optim") or DEFAULT_OPTIM),
        attention=attention_implementation(given.files.config),
        padding_free=flattens_rows(stage.train),
        liger=bool(stage.train.get("use_liger_kernel")) and device == "cuda",
        sharding=_sharding(placement, given.zero, shape),
        overhead_gib=CUDA_WORKSPACE_GIB if device == "cuda" else 0.0,
        stage=given.name,
        frozen=given.frozen,
    )
    request = _with_trainer(_with_policy(request, given.policy, stage), stage)
    where = "cuda:0" if device == "cuda" else device
    capacity = given.capacity_gib
    if capacity is not None and device == "cuda":
        capacity = max(capacity - CUDA_CONTEXT_GIB, 0.0)  # what the allocator can have
    return StageMemory(estimate_memory(request), where, capacity, request, assumed)


def _with_policy(request: MemoryRequest, policy: PolicyPlan, stage: StageConfig) -> MemoryRequest:
    """What the policy puts on the estimate: trained, adapted and quantized parameters."""
    quant = policy.quantization
    return replace(
        request,
        trained=tuple(policy.trained),
        lora_components=tuple(policy.lora.components if policy.lora else ()),
        lora_params=policy.lora_params or 0,
        quantized_components=tuple(quant.components if quant else ()),
        quantized_params=policy.quantized_params or 0,
        bits=policy.bits,
        double_quant=bool((stage.quantization or {}).get("bnb_4bit_use_double_quant")),
    )


def _with_trainer(request: MemoryRequest, stage: StageConfig) -> MemoryRequest:
    """What the trainer puts on the estimate (its kind says): the sequences a row puts through
    the model with gradients (a pair's two; KL sequences run without: `plan.memory`); a kind
    without TRL's fused head materializes the logits; an online kind's sequences are the
    prompt and its completion, and it generates a batch of them with a KV cache. An evaluation
    stage (`auto`, never chosen) counts as the default kind."""
    kind = trainer_named(None if stage.trainer == AUTO else stage.trainer)
    world_size = request.sharding.devices if request.sharding.mode != "model_parallel" else 1
    return replace(
        request,
        sequences_per_row=kind.sequences_per_row,
        fused_head=kind.fused_head,
        text_tokens=request.text_tokens + kind.completion_tokens(stage.train),
        generated_sequences=kind.generated_at_once(stage.train, world_size),
    )


def _text_tokens(
    train: Mapping[str, Any],
    lengths: LongestRow,
    kind: str,
    template: TemplateTokens | None,
    counted: int | None,
) -> tuple[int, tuple[str, ...]]:
    """Text tokens of the longest row, capped by max_length (a batch pads to its longest): its
    text as the model's tokenizer `counted` it (else its characters guessed as tokens), and
    what the chat template adds, measured with that tokenizer where it is at hand (else
    guessed). A preference pair's row is its prompt and the longer answer (`resolve` counts
    it so)."""
    messages = max(lengths.messages, 1)
    around = (
        template.fixed + template.per_message * messages
        if template
        else TEMPLATE_TOKENS_PER_MESSAGE * messages
    )
    content = counted if counted is not None else lengths.chars // CHARS_PER_TOKEN
    estimated = content + around
    limit = train.get("max_length", None if kind == "vlm" else DEFAULT_MAX_LENGTH)
    if train.get("packing") and limit:  # rows packed into sequences of max_length tokens
        return int(limit), (f"rows packed into {limit}-token sequences",)
    tokens = min(estimated, int(limit)) if limit else estimated
    return max(tokens, 1), (f"longest row ~{estimated} text tokens",)


def _sharding(
    placement: PlacementPlan | None, zero: ZeroSettings | None, shape: ModelShape
) -> Sharding:
    if placement is None or placement.mode == "single":
        return Sharding()
    if placement.mode == "model_parallel":
        return Sharding("model_parallel", max(len(placement.visible_gpus), 1))
    if placement.mode != "deepspeed" or zero is None:
        return Sharding(placement.mode, placement.world_size)
    bucket = zero.reduce_bucket_size or shape.hidden_size**2  # "auto": the Trainer's fill
    buckets = zero.buckets * bucket * zero.width
    return Sharding("deepspeed", placement.world_size, zero.stage, bucket_bytes=buckets)
