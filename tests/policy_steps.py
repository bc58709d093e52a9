"""The engine's two policy steps, planned then applied, for tests that start from a model.

The engine plans on the meta model (`plan.policies`) and applies the plan to the loaded one
(`run.policies`); these helpers do both on the same model, as a stage does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from peft import LoraConfig

from recipe_engine.plan.policies.lora import adapter_plan, plan_lora
from recipe_engine.plan.policies.quant import quantization_plan
from recipe_engine.resolve.inventory import LINEAR, inventory_of
from recipe_engine.run import policies


def lora_config(
    model: Any, *, layout: str, lora: Mapping, frozen: Sequence[str], patterns=()
) -> LoraConfig:
    return LoraConfig(**_adapter(model, layout, lora, frozen, patterns).config)


def apply_lora(
    model: Any, *, layout: str, lora: Mapping, frozen: Sequence[str], patterns=(), **kw: Any
) -> Any:
    adapter = _adapter(model, layout, lora, frozen, patterns)
    return policies.apply_lora(model, adapter, policies.Frozen(layout, frozen, patterns), **kw)


def bnb_config(
    quant: Mapping, *, layout: str, module_names: Sequence[str], trained: Sequence[str]
) -> Any:
    planned = quantization_plan(quant, layout=layout, module_names=module_names, trained=trained)
    return policies.bnb_config(planned)


def linear_names(model: Any) -> list[str]:
    """The layers bitsandbytes would replace, as the inventory lists them."""
    return inventory_of(model).names_of(LINEAR)


def _adapter(model, layout, lora, frozen, patterns):
    planned = plan_lora(
        inventory_of(model), layout=layout, lora=lora, frozen=frozen, patterns=patterns
    )
    return adapter_plan(planned, lora)
