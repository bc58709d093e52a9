"""A stage's policy, decided on the model's inventory (its parameters and modules, read by
`resolve` from the model built on the meta device from its config).

Frozen / fully trained / adapted components, the exact LoRA targets and `LoraConfig`
arguments, the exact `BitsAndBytesConfig` arguments with their skip-modules: all decided
here, once, and executed as they are by `run.policies`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from recipe_engine.config.components import COMPONENTS, Layout
from recipe_engine.config.schema import ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import component_of, layout_for
from recipe_engine.plan.policies.freeze import (
    check_freeze,
    compile_patterns,
    matches_any,
    trained_components,
)
from recipe_engine.plan.policies.lora import adapter_plan, plan_lora
from recipe_engine.plan.policies.quant import quantization_plan, skipped_by
from recipe_engine.plan.recipe_plan import AdapterPlan, PolicyPlan, QuantPlan
from recipe_engine.resolve.inventory import LINEAR, ModelInventory


def decide_policy(
    name: str, stage: StageConfig, model: ModelConfig, inventory: ModelInventory | None
) -> PolicyPlan:
    """Frozen / fully trained / LoRA components of a stage, checked against the model.

    Without the model's inventory (a hub model offline) the split is derived from the recipe
    alone and the module-level checks wait for load time, where this same function runs again
    on the inventory `resolve` reads then.
    """
    frozen, patterns = list(stage.freeze.components), list(stage.freeze.patterns)
    base = PolicyPlan(None, frozen, patterns, [], stage.gradient_checkpointing)
    if inventory is None:
        return _deferred(stage, base)
    layout = layout_for(inventory.model_type, model.layout, model.components)
    _check_declared_components(model.components, inventory, layout)
    counts = param_counts(inventory, layout)
    check_freeze(inventory, layout=layout, components=frozen, patterns=patterns)
    lora = None
    if stage.lora:
        planned = plan_lora(
            inventory, layout=layout, lora=stage.lora, frozen=frozen, patterns=patterns
        )
        trained, lora = planned.fully_trained, adapter_plan(planned, stage.lora)
    else:
        # `other` too: a model without a component map is trained through freeze.patterns. A
        # component all of whose parameters the patterns freeze is not trained.
        free = trained_components(inventory, layout=layout, frozen=frozen, patterns=patterns)
        trained = [c for c in free if counts.get(c)]  # a tied copy has none
    if lora is None and not trained:
        raise _trains_nothing(name, frozen, patterns)
    quant = None
    if stage.quantization:
        quant = quantization_plan(
            stage.quantization,
            layout=layout,
            module_names=inventory.module_names(),
            trained=trained,
        )
    return dataclasses.replace(
        base,
        layout=layout,
        trained=trained,
        lora=lora,
        quantization=quant,
        param_counts=counts,
        trainable_params=_trainable_params(inventory, layout, trained, patterns),
        lora_params=_lora_params(inventory, lora, stage.lora),
        quantized_params=_quantized_params(inventory, layout, quant),
    )


def _deferred(stage: StageConfig, base: PolicyPlan) -> PolicyPlan:
    """The split the recipe alone gives, module-level checks left for load time."""
    lora_components = list((stage.lora or {}).get("components") or [])
    trained = [c for c in COMPONENTS if c not in base.frozen and c not in lora_components]
    lora = AdapterPlan(lora_components, [], {}) if stage.lora else None
    return dataclasses.replace(base, trained=trained, lora=lora)


def _trains_nothing(name: str, frozen: Sequence[str], patterns: Sequence[str]) -> RecipeError:
    return RecipeError(
        f"Stage `{name}` trains nothing: `stage.{name}.freeze.components` freezes "
        f"{', '.join(frozen) or 'nothing'}"
        + (f" and `stage.{name}.freeze.patterns` the rest" if patterns else "")
        + f" and there is no LoRA, leaving no trainable parameters. Unfreeze a component "
        f"or add stage.{name}.lora.",
        key=f"stage.{name}.freeze.components",
    )


def _check_declared_components(
    declared: Mapping[str, Any], inventory: ModelInventory, layout: Layout
) -> None:
    """A component the model entry declares must hold parameters: a regex that matches none
    would silently move that part of the model to `other` (and a vision-only stage would
    train the projector instead of the vision tower)."""
    names = inventory.parameter_names()
    for component, regex in (declared or {}).items():
        if not any(component_of(name, layout) == component for name in names):
            prefixes = list(dict.fromkeys(".".join(n.split(".")[:3]) for n in names))
            raise RecipeError(
                f"`model.components.{component}` is {regex!r}, which matches no parameter of "
                f"this model (type {inventory.model_type}; re.match from the start of names "
                f"like {', '.join(prefixes[:4])}). Fix the regex, or drop it for the "
                "built-in layout.",
                key=f"model.components.{component}",
            )


def param_counts(inventory: ModelInventory, layout: Layout) -> dict[str, int]:
    """Parameters per component (a tied tensor counted once, under its first name)."""
    counts: dict[str, int] = {}
    seen: set[int] = set()
    for param in inventory.parameters:
        if param.tensor in seen:
            continue
        seen.add(param.tensor)
        component = component_of(param.name, layout)
        counts[component] = counts.get(component, 0) + param.numel
    return counts


def _trainable_params(
    inventory: ModelInventory, layout: Layout, trained: Sequence[str], patterns: Sequence[str]
) -> dict[str, int]:
    """Per fully trained component, the parameters it trains: all but what `freeze.patterns`
    freezes (what the run's trainable report will count, before LoRA's own)."""
    compiled = compile_patterns(patterns)
    counts = dict.fromkeys(trained, 0)
    seen: set[int] = set()
    for param in inventory.parameters:
        if param.tensor in seen:  # named_parameters() lists a tied tensor once
            continue
        seen.add(param.tensor)
        component = component_of(param.name, layout)
        if component in counts and not matches_any(param.name, compiled):
            counts[component] += param.numel
    return counts


def _lora_params(inventory: ModelInventory, lora: AdapterPlan | None, settings: Any) -> int:
    """r x (in + out) per adapted module: LoRA's A and B matrices (a convolution's kernel
    size left out)."""
    if lora is None:
        return 0
    rank = int((settings or {}).get("r", 8))
    total = 0
    for target in lora.targets:
        module = inventory.module(target)
        total += rank * (module.in_features + module.out_features)
    return total


# The layers transformers' replace_with_bnb_linear swaps for bitsandbytes ones: exactly
# nn.Linear (not a subclass) and GPT-2's Conv1D (integrations/bitsandbytes.py).
_BNB_REPLACED = ("Linear", "Conv1D")


def _quantized_params(inventory: ModelInventory, layout: Layout, quant: QuantPlan | None) -> int:
    """Linear weights bitsandbytes stores in 4/8 bits: in the quantized components, outside
    every skip-module (matched as transformers matches them, `quant.skipped_by`)."""
    if quant is None:
        return 0
    skips = list(quant.config.get("llm_int8_skip_modules") or [])
    total = 0
    for module in inventory.modules:
        name = module.name
        if module.kind != LINEAR or module.class_name not in _BNB_REPLACED:
            continue
        if component_of(f"{name}.weight", layout) not in quant.components:
            continue
        if not any(skipped_by(name, skip) for skip in skips):
            total += module.weight_numel
    return total


def evaluation_policy(name: str, stage: StageConfig, children: Sequence[str]) -> PolicyPlan:
    """An evaluation stage trains nothing; it must not quantize, adapt or feed a child."""
    for key in ("lora", "quantization"):
        if getattr(stage, key):
            raise RecipeError(
                f"`stage.{name}` is an evaluation stage (evaluate_only) but sets `{key}`; "
                f"remove it with stage.{name}.{key}=null.",
                key=f"stage.{name}.{key}",
            )
    if children:
        raise RecipeError(
            f"Stage `{children[0]}` starts from `{name}`, an evaluation stage, which has no "
            f"weights. Point `stage.{children[0]}.init.from_stage` at a training stage.",
            key=f"stage.{children[0]}.init.from_stage",
        )
    return PolicyPlan(None, list(COMPONENTS), [], [], False)
