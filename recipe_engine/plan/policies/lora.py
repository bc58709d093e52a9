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

from recipe_engine.config.components import ALL_COMPONENTS, Layout, validate_components
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.plan.components import (
    as_layout,
    canonical_name,
    component_of,
    covering_modules,
    no_map_hint,
)
from recipe_engine.plan.policies.freeze import compile_patterns, matches_any, trained_components
from recipe_engine.plan.recipe_plan import AdapterPlan
from recipe_engine.resolve.inventory import ADAPTABLE, LINEAR, ModelInventory

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


@dataclass(frozen=True)
class _Model:
    """The model as LoRA planning sees it: module names by kind, and each one's component."""

    param_names: list[str]
    adaptable: list[str]  # modules peft's LoRA can wrap when named (linear ones included)
    linear: list[str]  # modules all-linear adapts
    component: dict[str, str]  # adaptable module -> its component
    layout: Layout | str

    def holds(self, component: str, names: Sequence[str]) -> bool:
        return any(self.component[n] == component for n in names)


@dataclass(frozen=True)
class _Freeze:
    components: frozenset[str]
    patterns: list[re.Pattern]

    def weight_frozen(self, module: str) -> bool:
        return matches_any(module + ".weight", self.patterns)


def plan_lora(
    inventory: ModelInventory,
    *,
    layout: Layout | str,
    lora: Mapping,
    frozen: Sequence[str],
    patterns: Sequence[str] = (),
) -> LoraPlan:
    """Resolve targets, LoRA components and modules_to_save from a model's inventory.

    ``frozen`` are the frozen components, ``patterns`` the ``freeze.patterns``; a module whose
    weight a pattern freezes is never adapted.
    """
    validate_components(frozen, "freeze.components")
    freeze = _Freeze(frozenset(frozen), compile_patterns(patterns))
    model = _model(inventory, layout)
    trained = trained_components(model.param_names, layout=layout, frozen=frozen, patterns=patterns)
    explicit = "components" in lora
    chosen = (
        _explicit_components(lora, model, freeze)
        if explicit
        else _default_components(trained, model)
    )
    targets, dropped = _targets(lora, model, freeze, chosen, explicit)
    targets = _without_excluded(targets, lora.get("exclude_modules"))
    chosen = _components_of_targets(chosen, targets, model, explicit)
    fully = [c for c in trained if c not in chosen]
    return LoraPlan(
        targets=sorted(targets),
        components=[c for c in ALL_COMPONENTS if c in chosen],
        fully_trained=fully,
        modules_to_save=_modules_to_save(model, fully),
        dropped=dropped,
    )


def _model(inventory: ModelInventory, layout: Layout | str) -> _Model:
    adaptable = [canonical_name(n) for n in inventory.names_of(LINEAR, ADAPTABLE)]
    return _Model(
        param_names=[canonical_name(n) for n in inventory.parameter_names()],
        adaptable=adaptable,
        linear=[canonical_name(n) for n in inventory.names_of(LINEAR)],
        component={n: component_of(n, layout) for n in adaptable},
        layout=layout,
    )


def _explicit_components(lora: Mapping, model: _Model, freeze: _Freeze) -> list[str]:
    chosen = list(lora["components"] or [])
    validate_components(chosen, "lora.components")
    bad = [c for c in chosen if c in freeze.components]
    if bad:
        raise RecipeError(
            f"`lora.components` includes {', '.join(bad)}, which `freeze.components` "
            "freezes. A component is either frozen or trained (adapters are training).",
            key="lora.components",
        )
    absent = [c for c in chosen if not model.holds(c, model.adaptable)]
    if absent and not as_layout(model.layout).mapped:
        raise RecipeError(no_map_hint(as_layout(model.layout), "`lora.components`"), key="model")
    if absent:
        raise RecipeError(
            f"`lora.components` includes {', '.join(absent)}, which has no layer LoRA "
            f"can adapt in this {as_layout(model.layout).name} model.",
            key="lora.components",
        )
    return chosen


def _default_components(trained: Sequence[str], model: _Model) -> list[str]:
    return [c for c in trained if c not in _NOT_BY_DEFAULT and model.holds(c, model.linear)]


def _targets(
    lora: Mapping, model: _Model, freeze: _Freeze, chosen: list[str], explicit: bool
) -> tuple[list[str], dict[str, list[str]]]:
    """The modules that get adapters, and per target entry those it matched outside the LoRA
    components (not adapted)."""
    target_modules = lora.get("target_modules", ALL_LINEAR)
    if isinstance(target_modules, str) and target_modules.lower() == ALL_LINEAR:
        return _all_linear(model, freeze, chosen), {}
    targets: list[str] = []
    dropped: dict[str, list[str]] = {}
    for entry in _target_entries(target_modules):
        label = entry.pattern if isinstance(entry, re.Pattern) else entry
        matched = _entry_matches(entry, model.adaptable)
        if not matched:
            raise _no_match_error(label, model.linear)
        inside = _inside(matched, label, model, freeze, (chosen, explicit))
        outside = [n for n in matched if n not in inside]
        if outside:
            dropped[label] = outside
        targets.extend(n for n in inside if n not in targets)
    return targets, dropped


def _all_linear(model: _Model, freeze: _Freeze, chosen: list[str]) -> list[str]:
    """Inside the LoRA components only; lm_head (the output embedding) never."""
    targets = [
        n
        for n in model.linear
        if model.component[n] in chosen
        and model.component[n] != "lm_head"
        and not freeze.weight_frozen(n)
    ]
    if not targets:
        raise RecipeError(
            "`lora.target_modules: all-linear` finds no linear layer to adapt: "
            f"the LoRA components ({', '.join(chosen) or 'none'}) hold none that is not "
            "frozen. Unfreeze a component or list `lora.components`.",
            key="lora.target_modules",
        )
    return targets


def _target_entries(target_modules: Any) -> list[Any]:
    if isinstance(target_modules, str):
        try:
            return [re.compile(target_modules)]
        except re.error as exc:
            raise RecipeError(
                f"`lora.target_modules` {target_modules!r} is not a valid regex: {exc}.",
                key="lora.target_modules",
            ) from None
    if isinstance(target_modules, Sequence) and all(isinstance(t, str) for t in target_modules):
        return list(target_modules)
    raise RecipeError(
        "`lora.target_modules` must be 'all-linear', a regex string or a list of "
        f"module names, not {target_modules!r}.",
        key="lora.target_modules",
    )


def _inside(
    matched: list[str],
    label: str,
    model: _Model,
    freeze: _Freeze,
    choice: tuple[list[str], bool],
) -> list[str]:
    """What one target entry adapts: its matches inside the LoRA components, not frozen."""
    chosen, explicit = choice
    comp = model.component
    inside = [n for n in matched if comp[n] in chosen or not explicit]
    inside = [n for n in inside if comp[n] not in freeze.components and not freeze.weight_frozen(n)]
    if not explicit:
        # Default components: an explicit target may also pick lm_head/embeddings,
        # but only where a name was given for them (not a suffix hitting them by luck).
        inside = [n for n in inside if comp[n] not in _NOT_BY_DEFAULT or n == label]
    if inside:
        return inside
    where = sorted({comp[n] for n in matched})
    frozen_hit = [c for c in where if c in freeze.components]
    if frozen_hit or all(freeze.weight_frozen(n) for n in matched):
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


def _without_excluded(targets: list[str], exclude: Any) -> list[str]:
    if exclude:
        rx = (
            compile_patterns([exclude], "lora.exclude_modules")[0]
            if isinstance(exclude, str)
            else None
        )
        targets = [
            n for n in targets if not (rx.fullmatch(n) if rx else _entry_matches_any(n, exclude))
        ]
    if not targets:
        raise RecipeError(
            "No LoRA target is left after `lora.exclude_modules`.", key="lora.exclude_modules"
        )
    return targets


def _components_of_targets(
    chosen: list[str], targets: list[str], model: _Model, explicit: bool
) -> list[str]:
    if not explicit:
        # A default component the targets missed is trained in full, not silently frozen.
        return [c for c in ALL_COMPONENTS if model.holds(c, targets)]
    empty = [c for c in chosen if not model.holds(c, targets)]
    if empty:
        raise RecipeError(
            f"`lora.components` includes {', '.join(empty)}, but no LoRA target lies there "
            "(after `target_modules`, `exclude_modules` and `freeze.patterns`), so it would "
            "be neither frozen nor trained.",
            key="lora.components",
        )
    return chosen


def _modules_to_save(model: _Model, fully: list[str]) -> list[str]:
    selected = [n for n in model.param_names if component_of(n, model.layout) in fully]
    to_save, uncovered = covering_modules(model.param_names, selected, names_are_modules=False)
    if uncovered:
        raise RecipeError(
            f"{', '.join(uncovered[:3])} must be trained in full but sits directly on a module "
            "shared with adapted or frozen parameters, so PEFT cannot save it. Freeze it with "
            "`freeze.patterns` or freeze its component.",
            key="freeze.components",
        )
    return to_save


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
