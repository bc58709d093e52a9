"""Fused kernels and gradient checkpointing, as the plan chooses them.

`use_liger_kernel` (a TrainingArguments key) asks the Trainer to patch the model with Liger's
Triton kernels: they run on CUDA only, and Liger has them for the model types of its
`MODEL_TYPE_TO_APPLY_LIGER_FN` (liger_kernel/transformers/monkey_patch.py). TRL 1.16's
SFTTrainer keeps its own fused LM head and turns Liger's fused linear cross-entropy off, so the
logits are not materialised either way; what Liger changes in memory is its SwiGLU kernel,
which saves the MLP's two inputs and recomputes the rest (`plan.memory.LIGER_I`). Where the
kernels cannot run, the key is dropped with the reason: the stage trains the same weights
without them, so its key is the key without it.

Gradient checkpointing is turned on by the plan where the estimated peak does not fit the
device without it and fits with it; the stage's `gradient_checkpointing` then says so, and
that enters its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.plan.memory import estimate_memory
from recipe_engine.plan.memory_fit import StageMemory

LIGER_KEY = "use_liger_kernel"
# liger-kernel's MODEL_TYPE_TO_APPLY_LIGER_FN (linkedin/Liger-Kernel, main, 2026).
LIGER_MODEL_TYPES = frozenset(
    {
        "deepseek_v3",
        "exaone4",
        "falcon_h1",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "glm4",
        "glm4v",
        "glm4v_moe",
        "gpt_oss",
        "granite",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "internvl",
        "llama",
        "llama4",
        "llama4_text",
        "llava",
        "ministral",
        "mistral",
        "mixtral",
        "mllama",
        "mllama_text_model",
        "nemotron",
        "olmo2",
        "olmo3",
        "paligemma",
        "phi3",
        "pixtral",
        "qwen2",
        "qwen2_5_vl",
        "qwen2_vl",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
        "qwen3_vl_moe",
        "smollm3",
        "smolvlm",
    }
)


@dataclass(frozen=True)
class KernelChoice:
    """The stage's `train` keys with `use_liger_kernel` as it runs, and why."""

    train: LibraryKwargs
    liger: bool = False  # the Trainer applies Liger's kernels
    notes: list[str] = field(default_factory=list)


def decide_liger(train: LibraryKwargs, device: str, model_type: str | None) -> KernelChoice:
    """`use_liger_kernel=true` passed where Liger's kernels run (CUDA, a model type Liger
    patches), else dropped with the reason."""
    if not train.get(LIGER_KEY):
        return KernelChoice(train)
    kept = {k: v for k, v in train.items() if k != LIGER_KEY}
    if device != "cuda":
        why = f"Liger's kernels are Triton kernels for CUDA GPUs and the stage trains on {device}"
        return KernelChoice(kept, notes=[f"use_liger_kernel: skipped: {why}"])
    if model_type not in LIGER_MODEL_TYPES:
        what = f"model type `{model_type}`" if model_type else "a model whose config is unread"
        return KernelChoice(
            kept, notes=[f"use_liger_kernel: skipped: Liger has no kernels for {what}"]
        )
    return KernelChoice(
        train,
        liger=True,
        notes=[
            f"use_liger_kernel: Liger's RMSNorm, SwiGLU and RoPE kernels on `{model_type}` "
            "(TRL keeps its fused LM head, so the logits are never materialised); the estimate "
            "counts SwiGLU's smaller saved activations"
        ],
    )


def checkpointing_needed(memory: StageMemory | None) -> str | None:
    """Why the plan turns gradient checkpointing on: the estimate does not fit the device
    without it and fits with it; None where it fits, is on already, or would not help."""
    if memory is None or memory.fits or memory.capacity_gib is None:
        return None
    request = memory.request
    if request.gradient_checkpointing:
        return None
    checkpointed = estimate_memory(replace(request, gradient_checkpointing=True)).peak
    if checkpointed > memory.capacity_gib:
        return None
    return (
        "gradient checkpointing: on, chosen by the plan: the estimate "
        f"(~{memory.estimate.peak:.1f} GiB) does not fit {memory.where}'s "
        f"{memory.capacity_gib:.0f} GiB without it, ~{checkpointed:.1f} GiB with it "
        "(layers recomputed in the backward pass: slower steps)"
    )
