"""A stage's memory estimate as `plan` prints it, and what would make it fit a device.

`plan.memory` does the arithmetic; this module renders its breakdown and, when the peak is over
the device's memory, tries the cheapest changes on the same request (a smaller batch, gradient
checkpointing, 4-bit on a frozen language model, LoRA or precomputed log-probs instead of a
reference copy, sharding) and names those that fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recipe_engine.plan.memory import (
    LORA_SHARE,
    MemoryEstimate,
    MemoryRequest,
    Sharding,
    estimate_memory,
)


@dataclass(frozen=True)
class StageMemory:
    """A stage's estimate as `plan` prints it, with what would make it fit."""

    estimate: MemoryEstimate
    where: str  # cuda:0 | cpu | mps
    capacity_gib: float | None  # the device's memory; None: unknown (CPU)
    request: MemoryRequest
    assumptions: tuple[str, ...] = ()

    def describe(self) -> str:
        return describe_memory(self.estimate, self.where, self.capacity_gib)

    @property
    def fits(self) -> bool:
        return self.capacity_gib is None or self.estimate.peak <= self.capacity_gib

    def advice(self) -> list[str]:
        if self.fits or self.capacity_gib is None:
            return []
        return fit_advice(self.request, self.capacity_gib)


def describe_memory(estimate: MemoryEstimate, where: str, capacity_gib: float | None) -> str:
    """`~17.4 GiB peak on cuda:0 of 48 GiB (weights 8.9, optimizer 2.7, ...)`; below one
    GiB in MiB, so a tiny model's estimate still says something."""
    scale, unit = (1.0, "GiB") if estimate.peak >= 1 else (1024.0, "MiB")
    parts = ", ".join(
        f"{name} {value * scale:.1f}" for name, value in estimate.parts() if value * scale >= 0.05
    )
    of = f" of {capacity_gib:.0f} GiB" if capacity_gib else ""
    each = f" (each of {estimate.devices})" if estimate.devices > 1 else ""
    return f"~{estimate.peak * scale:.1f} {unit} peak on {where}{each}{of} ({parts})"


def fit_advice(req: MemoryRequest, capacity_gib: float) -> list[str]:
    """What would bring the stage under `capacity_gib` per device, cheapest change first."""
    advice: list[str] = []
    for batch in (req.batch // 2, req.batch // 4, 1):
        if (
            1 <= batch < req.batch
            and estimate_memory(replace(req, batch=batch)).peak <= capacity_gib
        ):
            advice.append(
                f"per_device_train_batch_size={batch} (raise gradient_accumulation_steps)"
            )
            break
    if not req.gradient_checkpointing:
        if estimate_memory(replace(req, gradient_checkpointing=True)).peak <= capacity_gib:
            advice.append("gradient_checkpointing=true")
    if req.bits == "none" and "language_model" not in req.trained:
        quantized = replace(
            req,
            bits="4bit",
            double_quant=True,
            quantized_components=("language_model",),
            quantized_params=req.param_counts.get("language_model", 0),
        )
        if estimate_memory(quantized).peak <= capacity_gib:
            advice.append("quantization 4-bit on the frozen language model")
    advice += _reference_advice(req, capacity_gib)
    advice += _image_advice(req, capacity_gib)
    for devices in (2, 4, 8):
        sharded = replace(req, sharding=Sharding("fsdp", devices))
        if estimate_memory(sharded).peak <= capacity_gib:
            advice.append(f"parallel=fsdp over {devices} GPUs")
            break
    return advice


def _reference_advice(req: MemoryRequest, capacity_gib: float) -> list[str]:
    """A frozen copy of the starting weights (DPO's or KTO's reference for a full fine-tune):
    LoRA makes the reference the adapter-disabled base; text rows can have the reference's
    log-probs computed once before training instead."""
    copies = [model for model in req.frozen if model.same_storage]
    if not copies:
        return []
    estimate = estimate_memory(req)
    copy = f"{sum(estimate.of(model.label) for model in copies):.1f} GiB"
    name, advice = req.stage or "<name>", []
    without = replace(req, frozen=tuple(m for m in req.frozen if not m.same_storage))
    language = req.param_counts.get("language_model", 0)
    lora = replace(without, trained=(), lora_components=("language_model",))
    if estimate_memory(replace(lora, lora_params=language // LORA_SHARE)).peak <= capacity_gib:
        rest = ",".join(c for c in req.param_counts if c != "language_model")
        advice.append(
            f"LoRA on the language model, the rest frozen (stage.{name}.lora.components="
            f"[language_model], stage.{name}.freeze.components=[{rest}]): the reference is "
            f"then the adapter-disabled base, not a {copy} frozen copy"
        )
    if not req.images_per_row and estimate_memory(without).peak <= capacity_gib:
        advice.append(
            f"stage.{name}.train.precompute_ref_log_probs=true (TRL scores the reference "
            f"once before training and keeps no {copy} copy; text rows only)"
        )
    return advice


def _image_advice(req: MemoryRequest, capacity_gib: float) -> list[str]:
    """The largest image limit for the processor under which the stage fits: the data's
    images then give fewer visual tokens (`model.processor` sets it for training, evaluation
    and this estimate alike)."""
    vision = req.shape.vision
    if vision is None or not req.images_per_row:
        return []
    for cap in vision.caps:
        capped = replace(req, shape=replace(req.shape, vision=vision.capped(cap)))
        if estimate_memory(capped).peak <= capacity_gib:
            return [
                f"++model.processor.{cap.setting}={cap.value} (the images then give "
                f"{cap.image.tokens:,} visual tokens each, not {vision.tokens_per_image:,})"
            ]
    return []
