"""A stage's precision, decided once: the dtype of every parameter it holds and of the
activations of every forward it runs (training, the preflight, evaluation, generation).

The libraries each decide a little of this on their own, and together they left a bfloat16
QLoRA stage with three dtypes (FIELD-NOTES.md, section 10): `peft.prepare_model_for_kbit_training`
upcasts every weight bitsandbytes leaves unquantized to float32 (a frozen vision tower
included: 2.7 GB at Qwen2-VL-2B's size, which the memory plan did not count), TRL casts a k-bit
model's trainable weights to bfloat16 whatever the stage's dtype (QLoRA's recipe), and PEFT keeps
LoRA weights in float32 (`autocast_adapter_dtype`). Training survived it (TRL's fused LM head
casts for itself), generation did not: float32 hidden states met a bfloat16 lm_head.

The engine decides instead, here, and `run.precision` makes the model so and checks it:
- every weight stored unquantized, frozen or trained in full (a `modules_to_save` copy
  included), is held in the stage's dtype: nothing is upcast behind the plan's back;
- LoRA's matrices are float32 (PEFT's default: an update smaller than bfloat16 can represent
  is not lost), except under a k-bit base in bfloat16, where they follow QLoRA's recipe as TRL
  does and are bfloat16; a DoRA magnitude vector stays float32 (TRL leaves it so);
- activations are in the stage's dtype, or in the Trainer's half precision where it
  autocasts (bf16 / fp16 on an accelerator), and every forward the engine runs outside the
  Trainer autocasts the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from recipe_engine.config.library_objects import LibraryKwargs

DType = Literal["float32", "bfloat16", "float16"]
# A DoRA magnitude vector's updates can be smaller than bfloat16 represents (TRL #7268).
MAGNITUDE_DTYPE: DType = "float32"


@dataclass(frozen=True)
class PrecisionPlan:
    """The dtypes a stage holds and computes in, in every phase."""

    weights: DType  # every unquantized weight, frozen or trained in full: loaded, trained, saved
    adapters: DType | None  # LoRA's A and B matrices (None: no LoRA)
    activations: DType  # what every forward computes in
    autocast: bool  # the Trainer's mixed precision: the engine's own forwards autocast too
    quantized: str | None = None  # k-bit storage of the quantized weights, e.g. "4bit"

    def describe(self) -> str:
        """One line for `plan`: each kind of parameter's dtype and the activations'."""
        held = (
            f"{self.quantized} weights, other weights {self.weights}"
            if self.quantized
            else (f"weights {self.weights}")
        )
        adapters = f", LoRA {self.adapters}" if self.adapters else ""
        how = "autocast" if self.autocast else "no autocast"
        return f"{held}{adapters}; activations {self.activations} ({how}) in every forward"


def decide_precision(
    dtype: DType, *, quantized: str | None, lora: bool, trainer: LibraryKwargs
) -> PrecisionPlan:
    """The stage's precision from its dtype, its quantized weights' storage (`k_bit_storage`;
    None: none), whether it trains LoRA and the trainer settings the plan decided (bf16 /
    fp16)."""
    adapters: DType | None = None
    if lora:
        adapters = "bfloat16" if quantized and dtype == "bfloat16" else "float32"
    half: DType | None = (
        "bfloat16" if trainer.get("bf16") else "float16" if trainer.get("fp16") else None
    )
    return PrecisionPlan(
        weights=dtype,
        adapters=adapters,
        activations=half or dtype,
        autocast=half is not None,
        quantized=quantized,
    )


def k_bit_storage(bits: str, config: Mapping[str, Any]) -> str:
    """How bitsandbytes stores and computes the quantized weights (`bits` 4bit | 8bit, the
    BitsAndBytesConfig arguments), e.g. "4bit nf4 (computed in bfloat16)"."""
    four = bits == "4bit"
    kind = config.get("bnb_4bit_quant_type") if four else None
    compute = config.get("bnb_4bit_compute_dtype") if four else None
    name = " ".join(str(part) for part in (bits, kind) if part)
    return f"{name} (computed in {compute})" if compute else name
