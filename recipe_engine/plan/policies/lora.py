"""LoRA policy: adapters on the linear layers of chosen components, full training elsewhere.

The ``lora`` mapping holds ``peft.LoraConfig`` keys plus our ``components``. Targets are
resolved here to the exact module names, so PEFT's own matching (suffixes, regexes,
"all-linear" that also reaches the vision tower) never decides what gets adapted.
Non-frozen components without adapters are trained fully through ``modules_to_save``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.config.components import (
    ALL_COMPONENTS,
    Layout,
    as_layout,
    canonical_name,
    component_of,
    covering_modules,
    no_map_hint,
    validate_components,
)
from recipe_engine.config.library_keys import validate_lora
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.plan.policies.freeze import compile_patterns, matches_any, trained_components
from recipe_engine.plan.recipe_plan import AdapterPlan

ALL_LINEAR = "all-linear"
# Never adapted by the default: adapters on lm_head/embeddings are an explicit choice.
_NOT_BY_DEFAULT = {"lm_head", "embeddings"}


@dataclass
class LoraPlan:
    """What LoRA will do to one model: the engine logs this before loading weights."""

    targets: list[str]  # exact module names that get adapters
    components: list[str]  # components trained through adapters
    fully_trained: list[str]  # non-frozen components trained in full (modules_to_save)
    modules_to_save: list[str]  # module names covering `fully_trained`
    # Modules a target entry matched but that lie outside `components` (not adapted).
    dropped: dict[str, list[str]] = field(default_factory=dict)


def _is_linear(module: Any) -> bool:
    import torch
    from transformers.pytorch_utils import Conv1D

    # bitsandbytes Linear4bit/Linear8bitLt subclass nn.Linear, so k-bit layers count.
    return isinstance(module, (torch.nn.Linear, Conv1D))


def _is_lora_layer(module: Any) -> bool:
    import torch

    # Layer types peft's LoRA can wrap when named explicitly.
    kinds = (torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    return _is_linear(module) or isinstance(module, kinds)


def _entry_matches(entry: Any, names: Sequence[str]) -> list[str]:
    """Module names one ``target_modules`` entry selects, with LoraConfig's rules."""
    if isinstance(entry, re.Pattern):
        return [n for n in names if entry.fullmatch(n)]
    return [n for n in names if n == entry or n.endswith("." + entry)]


def _no_match_error(entry: str, linear: Sequence[str]) -> RecipeError:
    short = sorted({n.rsplit(".", 1)[-1] for n in linear})
    hint = did_you_mean(entry.rsplit(".", 1)[-1], short)
    return RecipeError(
        f"`lora.target_modules` entry {entry!r} matches no module.{hint} "
        f"Linear layer names in this model: {', '.join(short[:20])}"
        f"{', ...' if len(short) > 20 else ''} (e.g. {', '.join(linear[:3])}).",
        key="lora.target_modules",
    )


def plan_lora(
    model: Any,
    *,
    layout: Layout | str,
    lora: Mapping,
    frozen: Sequence[str],
    patterns: Sequence[str] = (),
) -> LoraPlan:
    """Resolve targets, LoRA components and modules_to_save without touching weights.

    Works on a meta-device model. ``frozen`` are the frozen components, ``patterns`` the
    ``freeze.patterns``; a module whose weight a pattern freezes is never adapted.
    """
    validate_lora(lora)
    validate_components(frozen, "freeze.components")
    compiled = compile_patterns(patterns)
    frozen_set = set(frozen)
    param_names = [canonical_name(n) for n, _ in model.named_parameters(remove_duplicate=False)]
    trained = trained_components(param_names, layout=layout, frozen=frozen, patterns=patterns)
    modules = [(canonical_name(n), m) for n, m in model.named_modules() if n]
    adaptable = [n for n, m in modules if _is_lora_layer(m)]
    linear = [n for n, m in modules if _is_linear(m)]
    comp = {n: component_of(n, layout) for n in adaptable}

    def weight_frozen(name: str) -> bool:
        return matches_any(name + ".weight", compiled)

    explicit = "components" in lora
    if explicit:
        chosen = list(lora["components"] or [])
        validate_components(chosen, "lora.components")
        bad = [c for c in chosen if c in frozen_set]
        if bad:
            raise RecipeError(
                f"`lora.components` includes {', '.join(bad)}, which `freeze.components` "
                "freezes. A component is either frozen or trained (adapters are training).",
                key="lora.components",
            )
        absent = [c for c in chosen if not any(comp[n] == c for n in adaptable)]
        if absent and not as_layout(layout).mapped:
            raise RecipeError(no_map_hint(as_layout(layout), "`lora.components`"), key="model")
        if absent:
            raise RecipeError(
                f"`lora.components` includes {', '.join(absent)}, which has no layer LoRA "
                f"can adapt in this {as_layout(layout).name} model.",
                key="lora.components",
            )
    else:
        chosen = [
            c for c in trained if c not in _NOT_BY_DEFAULT and any(comp[n] == c for n in linear)
        ]

    target_modules = lora.get("target_modules", ALL_LINEAR)
    dropped: dict[str, list[str]] = {}
    if isinstance(target_modules, str) and target_modules.lower() == ALL_LINEAR:
        # Inside the LoRA components only; lm_head (the output embedding) never.
        targets = [
            n for n in linear if comp[n] in chosen and comp[n] != "lm_head" and not weight_frozen(n)
        ]
        if not targets:
            raise RecipeError(
                "`lora.target_modules: all-linear` finds no linear layer to adapt: "
                f"the LoRA components ({', '.join(chosen) or 'none'}) hold none that is not "
                "frozen. Unfreeze a component or list `lora.components`.",
                key="lora.target_modules",
            )
    else:
        if isinstance(target_modules, str):
            try:
                entries: list[Any] = [re.compile(target_modules)]
            except re.error as exc:
                raise RecipeError(
                    f"`lora.target_modules` {target_modules!r} is not a valid regex: {exc}.",
                    key="lora.target_modules",
                ) from None
        elif isinstance(target_modules, Sequence) and all(
            isinstance(t, str) for t in target_modules
        ):
            entries = list(target_modules)
        else:
            raise RecipeError(
                "`lora.target_modules` must be 'all-linear', a regex string or a list of "
                f"module names, not {target_modules!r}.",
                key="lora.target_modules",
            )
        targets = []
        for entry in entries:
            label = entry.pattern if isinstance(entry, re.Pattern) else entry
            matched = _entry_matches(entry, adaptable)
            if not matched:
                raise _no_match_error(label, linear)
            inside = [n for n in matched if comp[n] in chosen or not explicit]
            inside = [n for n in inside if comp[n] not in frozen_set and not weight_frozen(n)]
            if not explicit:
                # Default components: an explicit target may also pick lm_head/embeddings,
                # but only where a name was given for them (not a suffix hitting them by luck).
                inside = [n for n in inside if comp[n] not in _NOT_BY_DEFAULT or n == label]
            if not inside:
                where = sorted({comp[n] for n in matched})
                frozen_hit = [c for c in where if c in frozen_set]
                if frozen_hit or all(weight_frozen(n) for n in matched):
                    raise RecipeError(
                        f"`lora.target_modules` entry {label!r} lands only in frozen "
                        f"parameters ({', '.join(frozen_hit) or 'freeze.patterns'}: "
                        f"{', '.join(matched[:3])}). Adapters in a frozen component would "
                        "train it; unfreeze it or change the target.",
                        key="lora.target_modules",
                    )
                raise RecipeError(
                    f"`lora.target_modules` entry {label!r} lands only in {', '.join(where)}, "
                    f"which is not a LoRA component ({', '.join(chosen) or 'none'}); it is "
                    "trained in full. Add it to `lora.components` to adapt it instead.",
                    key="lora.target_modules",
                )
            outside = [n for n in matched if n not in inside]
            if outside:
                dropped[label] = outside
            targets.extend(n for n in inside if n not in targets)
    exclude = lora.get("exclude_modules")
    if exclude:
        rx = (
            compile_patterns([exclude], "lora.exclude_modules")[0]
            if isinstance(exclude, str)
            else None
        )
        targets = [
            n for n in targets if not (rx.fullmatch(n) if rx else _entry_matches_any(n, exclude))
        ]
    if explicit:
        empty = [c for c in chosen if not any(comp[n] == c for n in targets)]
        if empty:
            raise RecipeError(
                f"`lora.components` includes {', '.join(empty)}, but no LoRA target lies there "
                "(after `target_modules`, `exclude_modules` and `freeze.patterns`), so it would "
                "be neither frozen nor trained.",
                key="lora.components",
            )
    else:
        # A default component the targets missed is trained in full, not silently frozen.
        chosen = [c for c in ALL_COMPONENTS if any(comp[n] == c for n in targets)]
    if not targets:
        raise RecipeError(
            "No LoRA target is left after `lora.exclude_modules`.", key="lora.exclude_modules"
        )

    fully = [c for c in trained if c not in chosen]
    selected = [n for n in param_names if component_of(n, layout) in fully]
    to_save, uncovered = covering_modules(param_names, selected, names_are_modules=False)
    if uncovered:
        raise RecipeError(
            f"{', '.join(uncovered[:3])} must be trained in full but sits directly on a module "
            "shared with adapted or frozen parameters, so PEFT cannot save it. Freeze it with "
            "`freeze.patterns` or freeze its component.",
            key="freeze.components",
        )
    return LoraPlan(
        targets=sorted(targets),
        components=[c for c in ALL_COMPONENTS if c in chosen],
        fully_trained=fully,
        modules_to_save=to_save,
        dropped=dropped,
    )


def _plain(value: Any) -> Any:
    # Recipes arrive as OmegaConf containers; PEFT checks isinstance(list/dict).
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


def _entry_matches_any(name: str, entries: Sequence[str]) -> bool:
    return any(name == e or name.endswith("." + e) for e in entries)


def adapter_plan(planned: LoraPlan, lora: Mapping) -> AdapterPlan:
    """The `LoraConfig` arguments for a planned LoRA: exact targets, modules_to_save."""
    config = {k: _plain(v) for k, v in lora.items() if k not in {"components", "exclude_modules"}}
    config.update(
        task_type="CAUSAL_LM",
        target_modules=planned.targets,
        modules_to_save=planned.modules_to_save or None,
    )
    return AdapterPlan(planned.components, planned.targets, config)
