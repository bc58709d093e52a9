"""A stage's policy, decided on the model built on the meta device from its config.

Frozen / fully trained / adapted components, the exact LoRA targets and `LoraConfig`
arguments, the exact `BitsAndBytesConfig` arguments with their skip-modules: all decided
here, once, and executed as they are by `run.policies`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.components import (
    COMPONENTS,
    Layout,
    component_of,
    layout_for,
)
from recipe_engine.config.schema import ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan import memo
from recipe_engine.plan.models import load_config, meta_model, model_location
from recipe_engine.plan.policies.freeze import (
    check_freeze,
    compile_patterns,
    matches_any,
    trained_components,
)
from recipe_engine.plan.policies.lora import adapter_plan, plan_lora
from recipe_engine.plan.policies.quant import quantization_plan
from recipe_engine.plan.recipe_plan import AdapterPlan, PolicyPlan, QuantPlan


@dataclass
class ModelInventory:
    """What the checks need to know of a model, read from its config on the meta device."""

    layout: Layout
    param_counts: dict[str, int]  # component -> parameters
    meta_model: Any


def plan_policy(
    name: str, stage: StageConfig, model: ModelConfig, readable: bool = True
) -> PolicyPlan:
    """The stage's policy, checked against the model (remembered per config and policy).
    `readable=False`: the model's config cannot be had here (the hub did not answer)."""
    config = _local_config(model)
    if config is None:  # a hub model: its config may be unreachable; checked when it loads
        return decide_policy(name, stage, model_inventory(model) if readable else None)
    inputs = {
        "config": memo.file_digest(config),
        "kind": model.kind,
        "layout": {"name": model.layout, "components": model.components},
        "policy": {k: dataclasses.asdict(stage)[k] for k in ("freeze", "lora", "quantization")},
    }
    checked = memo.remembered(
        "policies",
        inputs,
        lambda: dataclasses.asdict(decide_policy(name, stage, model_inventory(model))),
    )
    return _policy_from_dict(checked, stage.gradient_checkpointing)


def decide_policy(name: str, stage: StageConfig, inventory: ModelInventory | None) -> PolicyPlan:
    """Frozen / fully trained / LoRA components of a stage, checked against the model.

    Without the model (a hub model offline) the split is derived from the recipe alone and
    the module-level checks wait for load time, where this same function runs again on the
    loaded model's inventory.
    """
    frozen, patterns = list(stage.freeze.components), list(stage.freeze.patterns)
    base = PolicyPlan(None, frozen, patterns, [], stage.gradient_checkpointing)
    if inventory is None:
        lora_components = list((stage.lora or {}).get("components") or [])
        trained = [c for c in COMPONENTS if c not in frozen and c not in lora_components]
        lora = AdapterPlan(lora_components, [], {}) if stage.lora else None
        return dataclasses.replace(base, trained=trained, lora=lora)
    meta, layout = inventory.meta_model, inventory.layout
    check_freeze(meta, layout=layout, components=frozen, patterns=patterns)
    lora = None
    if stage.lora:
        planned = plan_lora(meta, layout=layout, lora=stage.lora, frozen=frozen, patterns=patterns)
        trained, lora = planned.fully_trained, adapter_plan(planned, stage.lora)
    else:
        # `other` too: a model without a component map is trained through freeze.patterns. A
        # component all of whose parameters the patterns freeze is not trained.
        free = trained_components(meta, layout=layout, frozen=frozen, patterns=patterns)
        trained = [c for c in free if inventory.param_counts.get(c)]  # a tied copy has none
    if lora is None and not trained:
        raise RecipeError(
            f"Stage `{name}` trains nothing: `stage.{name}.freeze.components` freezes "
            f"{', '.join(frozen) or 'nothing'}"
            + (f" and `stage.{name}.freeze.patterns` the rest" if patterns else "")
            + f" and there is no LoRA, leaving no trainable parameters. Unfreeze a component "
            f"or add stage.{name}.lora.",
            key=f"stage.{name}.freeze.components",
        )
    quant = None
    if stage.quantization:
        names = [n for n, _ in meta.named_modules()]
        quant = quantization_plan(
            stage.quantization, layout=layout, module_names=names, trained=trained
        )
    return dataclasses.replace(
        base,
        layout=layout,
        trained=trained,
        lora=lora,
        quantization=quant,
        param_counts=inventory.param_counts,
        trainable_params=_trainable_params(meta, layout, trained, patterns),
        lora_params=_lora_params(meta, lora, stage.lora),
        quantized_params=_quantized_params(meta, layout, quant),
    )


def _trainable_params(
    meta: Any, layout: Layout, trained: Sequence[str], patterns: Sequence[str]
) -> dict[str, int]:
    """Per fully trained component, the parameters it trains: all but what `freeze.patterns`
    freezes (what the run's trainable report will count, before LoRA's own)."""
    compiled = compile_patterns(patterns)
    counts = dict.fromkeys(trained, 0)
    for name, param in meta.named_parameters():
        component = component_of(name, layout)
        if component in counts and not matches_any(name, compiled):
            counts[component] += param.numel()
    return counts


def _lora_params(meta: Any, lora: AdapterPlan | None, settings: Any) -> int:
    """r x (in + out) per adapted linear module: LoRA's A and B matrices."""
    if lora is None:
        return 0
    rank = int((settings or {}).get("r", 8))
    total = 0
    for target in lora.targets:
        module = meta.get_submodule(target)
        total += rank * (getattr(module, "in_features", 0) + getattr(module, "out_features", 0))
    return total


def _quantized_params(meta: Any, layout: Layout, quant: QuantPlan | None) -> int:
    """Linear weights bitsandbytes stores in 4/8 bits: in the quantized components, outside
    every skip-module (transformers matches a skip by module-name prefix or segment)."""
    if quant is None:
        return 0
    skips = list(quant.config.get("llm_int8_skip_modules") or [])
    total = 0
    for name, module in meta.named_modules():
        if type(module).__name__ != "Linear" or component_of(f"{name}.weight", layout) not in (
            quant.components
        ):
            continue
        if any(name == s or name.startswith(f"{s}.") or f".{s}" in f".{name}" for s in skips):
            continue
        total += module.weight.numel()
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


def model_inventory(model: ModelConfig, loaded: Any = None) -> ModelInventory | None:
    """The model on the meta device from its config (or a loaded model); None if unreachable."""
    if loaded is None:
        config = load_config(dataclasses.asdict(model))
        if config is None:
            return None
        loaded = meta_model(config, model.kind)
    layout = layout_for(loaded.config.model_type, model.layout, model.components)
    counts: dict[str, int] = {}
    for pname, param in loaded.named_parameters():
        component = component_of(pname, layout)
        counts[component] = counts.get(component, 0) + param.numel()
    return ModelInventory(layout, counts, loaded)


def _local_config(model: ModelConfig) -> Path | None:
    """The config.json of a tiny or local model (what a remembered check is keyed by)."""
    if model.source not in ("tiny", "local"):
        return None
    config = Path(model_location(dataclasses.asdict(model))) / "config.json"
    return config if config.is_file() else None


def _policy_from_dict(data: dict[str, Any], gradient_checkpointing: bool) -> PolicyPlan:
    lora, quant, layout = data.pop("lora"), data.pop("quantization"), data.pop("layout")
    return PolicyPlan(
        **{**data, "gradient_checkpointing": gradient_checkpointing},
        layout=Layout.from_dict(layout) if layout else None,
        lora=AdapterPlan(**lora) if lora else None,
        quantization=QuantPlan(**quant) if quant else None,
    )
