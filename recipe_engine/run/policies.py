"""Apply a planned policy to a loaded model: freeze, LoRA, quantization config.

Nothing is decided here: the targets, `modules_to_save`, skip-modules and every library
argument come from the stage's `PolicyPlan`. The checks that run again on the loaded model
are the planner's own (`check_freeze`), as a guard against a model that differs from its
config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recipe_engine.config import library_objects
from recipe_engine.config.components import Layout
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import component_of
from recipe_engine.plan.policies.freeze import check_freeze, compile_patterns, matches_any
from recipe_engine.plan.recipe_plan import AdapterPlan, QuantPlan
from recipe_engine.resolve.inventory import inventory_of

if TYPE_CHECKING:
    import peft
    from transformers import BitsAndBytesConfig


def bnb_config(quant: QuantPlan) -> BitsAndBytesConfig:
    """The planned `BitsAndBytesConfig` (dtype names become torch dtypes)."""
    try:
        return library_objects.bnb_config(quant.config)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"Invalid `quantization` settings: {exc}", key="quantization") from None


def apply_freeze(
    model: Any, *, layout: Layout | str, components: Sequence[str], patterns: Sequence[str]
) -> list[str]:
    """Set ``requires_grad`` by the freeze policy; return the frozen parameter names.

    Frozen parameters get ``requires_grad=False``; every other floating-point parameter
    gets ``True`` (quantized integer storage cannot require grad).
    """
    inventory = inventory_of(model)
    decisions = check_freeze(inventory, layout=layout, components=components, patterns=patterns)
    frozen_names = []
    named = model.named_parameters(remove_duplicate=False)
    for (name, param), listed in zip(named, inventory.parameters, strict=True):
        if decisions[listed.tensor][name]:
            param.requires_grad_(False)
            frozen_names.append(name)
        elif param.is_floating_point() or param.is_complex():
            param.requires_grad_(True)
    return frozen_names


@dataclass(frozen=True)
class Frozen:
    """What the freeze policy froze: components of `layout`, and parameters by pattern."""

    layout: Layout | str
    components: Sequence[str]
    patterns: Sequence[str] = ()


def apply_lora(
    model: Any,
    adapter: AdapterPlan,
    frozen: Frozen,
    *,
    gradient_checkpointing: bool = False,
    gradient_checkpointing_kwargs: Mapping | None = None,
) -> peft.PeftModel:
    """Wrap ``model`` in a PeftModel with the planned `LoraConfig`.

    A k-bit model is not put through ``peft.prepare_model_for_kbit_training``: it upcasts
    every unquantized weight (a frozen vision tower, norms, lm_head) to float32, where the
    stage's precision plan holds them in its dtype (`plan.precision`); what else it does is
    done here (gradient checkpointing) or by PEFT (freezing the base).
    """
    import peft

    try:
        config = library_objects.lora_config(adapter.config)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"Invalid `lora` settings: {exc}", key="lora") from None
    if gradient_checkpointing:
        enable_gradient_checkpointing(model, gradient_checkpointing_kwargs)
    peft_model = peft.get_peft_model(model, config)

    # ModulesToSaveWrapper makes the whole copy trainable; re-freeze what patterns froze.
    compiled = compile_patterns(frozen.patterns)
    for name, param in peft_model.named_parameters():
        if ".modules_to_save." in name and matches_any(name, compiled):
            param.requires_grad_(False)
    _check_trainable(peft_model, layout=frozen.layout, frozen=frozen.components)
    return peft_model


def enable_gradient_checkpointing(model: Any, gc_kwargs: Mapping | None = None) -> None:
    gc_kwargs = {"use_reentrant": False, **(gc_kwargs or {})}
    # transformers 5.23 renamed it; the old name still works but warns.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=gc_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
    if gc_kwargs["use_reentrant"]:
        # The embeddings are frozen, so with reentrant checkpointing nothing upstream of
        # the first checkpoint would require grad and the adapters would get no gradient.
        model.enable_input_require_grads()


def _check_trainable(model: Any, *, layout: Layout | str, frozen: Sequence[str]) -> None:
    # Guards the policy against library changes: nothing frozen may train.
    leaked = [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and component_of(n, layout) in set(frozen)
    ]
    if leaked:
        raise RuntimeError(f"LoRA left frozen parameters trainable: {leaked[:5]}")
