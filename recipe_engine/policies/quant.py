"""Quantization policy: bitsandbytes 4/8-bit on chosen components only.

The ``quantization`` mapping holds ``BitsAndBytesConfig`` keys plus our ``components``
(default ``["language_model"]``) and ``on_unsupported`` (``error`` | ``skip``). Everything
outside ``components`` (vision tower, projector, lm_head by default) stays unquantized:
we pass bitsandbytes an explicit ``llm_int8_skip_modules``, which in transformers 5
*replaces* its default skips (lm_head, tied weights) rather than adding to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from recipe_engine.components import (
    ALL_COMPONENTS,
    component_of,
    covering_modules,
    validate_components,
)
from recipe_engine.errors import RecipeError, unknown_key
from recipe_engine.validate import ENGINE_QUANT_KEYS, library_fields

if TYPE_CHECKING:
    from transformers import BitsAndBytesConfig

DEFAULT_COMPONENTS = ("language_model",)
ON_UNSUPPORTED = ("error", "skip")
# Keys that only one of the two modes reads; BitsAndBytesConfig ignores the others silently.
_ONLY_4BIT = {
    "bnb_4bit_compute_dtype",
    "bnb_4bit_quant_type",
    "bnb_4bit_use_double_quant",
    "bnb_4bit_quant_storage",
}
_ONLY_8BIT = {"llm_int8_threshold", "llm_int8_has_fp16_weight"}
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8")


def quantization_keys() -> set[str]:
    """Keys accepted in a stage's ``quantization`` mapping (BitsAndBytesConfig's arguments,
    read once per transformers version, plus the engine's own)."""
    return set(library_fields("BitsAndBytesConfig")) | ENGINE_QUANT_KEYS


def validate_quantization(quant: Mapping) -> None:
    """Check keys and values of a ``quantization`` mapping; RecipeError on the first problem."""
    if not isinstance(quant, Mapping):
        raise RecipeError("`quantization` must be a mapping.", key="quantization")
    valid = quantization_keys()
    for key in quant:
        if key not in valid:
            raise unknown_key(f"quantization.{key}", valid, "the `quantization` mapping")
    four, eight = bool(quant.get("load_in_4bit")), bool(quant.get("load_in_8bit"))
    if four and eight:
        raise RecipeError(
            "`quantization` sets both load_in_4bit and load_in_8bit; choose one.",
            key="quantization.load_in_4bit",
        )
    if not (four or eight):
        raise RecipeError(
            "`quantization` needs `load_in_4bit: true` or `load_in_8bit: true` "
            "(or drop the mapping to train unquantized).",
            key="quantization.load_in_4bit",
        )
    ignored = sorted(set(quant) & (_ONLY_4BIT if eight else _ONLY_8BIT))
    if ignored:
        mode = "load_in_8bit" if eight else "load_in_4bit"
        raise RecipeError(
            f"`quantization.{ignored[0]}` has no effect with {mode}; remove it.",
            key=f"quantization.{ignored[0]}",
        )
    components = quant.get("components", DEFAULT_COMPONENTS)
    validate_components(components, "quantization.components")
    if not components:
        raise RecipeError(
            "`quantization.components` is empty: nothing would be quantized.",
            key="quantization.components",
        )
    if "embeddings" in components:
        raise RecipeError(
            "`quantization.components` includes embeddings, but bitsandbytes quantizes linear "
            "layers only; embeddings keep their dtype. Remove it.",
            key="quantization.components",
        )
    on_unsupported = quant.get("on_unsupported", "error")
    if on_unsupported not in ON_UNSUPPORTED:
        raise RecipeError(
            f"`quantization.on_unsupported` must be one of {', '.join(ON_UNSUPPORTED)}, "
            f"not {on_unsupported!r}.",
            key="quantization.on_unsupported",
        )
    if quant.get("bnb_4bit_quant_type", "nf4") not in ("nf4", "fp4"):
        raise RecipeError(
            "`quantization.bnb_4bit_quant_type` must be nf4 or fp4.",
            key="quantization.bnb_4bit_quant_type",
        )
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        if key in quant and _dtype_name(quant[key]) not in _DTYPES:
            raise RecipeError(
                f"`quantization.{key}` must be one of {', '.join(_DTYPES)}, not {quant[key]!r}.",
                key=f"quantization.{key}",
            )


def _dtype_name(value: Any) -> str:
    # Accept "bfloat16", "torch.bfloat16" and torch.bfloat16 alike.
    return str(value).removeprefix("torch.")


def bnb_config(
    quant: Mapping,
    *,
    architecture: str,
    module_names: Sequence[str],
    trained: Sequence[str],
) -> BitsAndBytesConfig:
    """A ``BitsAndBytesConfig`` quantizing ``quantization.components`` only.

    ``module_names``: the model's module names (``named_modules`` of a meta-device
    instance, or just its linear layers, see :func:`linear_module_names`).
    ``trained``: the components the stage trains *in full* (not frozen, not LoRA);
    quantizing one of them is a RecipeError, since k-bit weights cannot be trained.
    """
    import torch
    from transformers import BitsAndBytesConfig

    validate_quantization(quant)
    components = list(quant.get("components", DEFAULT_COMPONENTS))
    clash = [c for c in components if c in set(trained)]
    if clash:
        raise RecipeError(
            f"`quantization.components` includes {', '.join(clash)}, which this stage trains "
            "in full; quantized weights cannot be trained. Freeze it (`freeze.components`), "
            "train it through LoRA (`lora.components`), or stop quantizing it.",
            key="quantization.components",
        )
    names = [n for n in module_names if n]
    present = {component_of(n, architecture) for n in names}
    absent = [c for c in components if c not in present]
    if absent:
        raise RecipeError(
            f"`quantization.components` includes {', '.join(absent)}, which this "
            f"{architecture} model does not have "
            f"(it has {', '.join(c for c in ALL_COMPONENTS if c in present)}).",
            key="quantization.components",
        )
    keep = [n for n in names if component_of(n, architecture) not in components]
    skip, _ = covering_modules(names, keep, names_are_modules=True)
    # A user's own skips come on top (they can only keep more in full precision).
    user_skip = list(quant.get("llm_int8_skip_modules") or [])
    kwargs = {k: v for k, v in quant.items() if k not in ENGINE_QUANT_KEYS}
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        if key in kwargs:
            kwargs[key] = getattr(torch, _dtype_name(kwargs[key]))
    kwargs["llm_int8_skip_modules"] = user_skip + [s for s in skip if s not in user_skip]
    try:
        return BitsAndBytesConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"Invalid `quantization` settings: {exc}", key="quantization") from None


def linear_module_names(model: Any) -> list[str]:
    """Names of the layers bitsandbytes would replace (``nn.Linear`` and GPT-2's Conv1D)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    return [n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))]


def quantized_modules(model: Any) -> list[str]:
    """Names of the bitsandbytes 4-bit/8-bit layers in ``model``."""
    try:
        import bitsandbytes as bnb

        kinds: tuple[type, ...] = (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    except ImportError:  # No bitsandbytes: nothing can be quantized by it.
        return []
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]
