"""Freeze policy: which parameters never change during a stage.

``freeze.components`` and ``freeze.patterns`` (regexes, ``re.search`` on canonical
parameter names) are frozen; every other parameter is trained.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from recipe_engine.config.components import ALL_COMPONENTS, Layout, validate_components
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import as_layout, canonical_name, component_of, no_map_hint
from recipe_engine.resolve.inventory import ModelInventory


def compile_patterns(patterns: Sequence[str], key: str = "freeze.patterns") -> list[re.Pattern]:
    """Compile user regexes, turning a bad one into a RecipeError naming ``key``."""
    if isinstance(patterns, str):
        raise RecipeError(f"`{key}` must be a list of regexes, e.g. ['{patterns}'].", key=key)
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except (re.error, TypeError) as exc:
            raise RecipeError(
                f"`{key}` entry {pattern!r} is not a valid regex: {exc}.", key=key
            ) from None
    return compiled


def matches_any(name: str, patterns: Sequence[re.Pattern]) -> bool:
    """Whether a parameter name (canonicalised) matches one of the freeze patterns."""
    canonical = canonical_name(name)
    return any(p.search(canonical) for p in patterns)


def _param_names(inventory_or_names: ModelInventory | Iterable[str]) -> list[str]:
    if isinstance(inventory_or_names, ModelInventory):
        # Every name: a tied lm_head only shows up under its second name.
        return inventory_or_names.parameter_names()
    return list(inventory_or_names)


def check_freeze(
    inventory: ModelInventory,
    *,
    layout: Layout | str,
    components: Sequence[str],
    patterns: Sequence[str],
) -> dict[int, dict[str, bool]]:
    """The freeze policy checked against a model's inventory (the meta model's at plan time,
    the loaded model's at run time).

    Returns, per tensor (`Parameter.tensor`), whether each of its names is frozen. Raises
    RecipeError for an unknown component, a component or pattern that selects nothing in this
    model, and for tied weights (``lm_head`` tied to ``embed_tokens``) frozen on one side only.
    """
    validate_components(components, "freeze.components")
    compiled = compile_patterns(patterns)
    frozen_components = set(components)
    named = [(p.name, p.tensor) for p in inventory.parameters]
    present = {component_of(name, layout) for name, _ in named}

    missing = [c for c in components if c not in present]
    if missing and not as_layout(layout).mapped:
        raise RecipeError(no_map_hint(as_layout(layout), "`freeze.components`"), key="model")
    if missing:
        raise RecipeError(
            f"`freeze.components` lists {', '.join(missing)}, but this {as_layout(layout).name} "
            "model "
            f"has no parameters there (its components: "
            f"{', '.join(c for c in ALL_COMPONENTS if c in present)}).",
            key="freeze.components",
        )
    for pattern, rx in zip(patterns, compiled, strict=True):
        if not any(rx.search(canonical_name(name)) for name, _ in named):
            sample = ", ".join(canonical_name(n) for n, _ in named[:5])
            raise RecipeError(
                f"`freeze.patterns` entry {pattern!r} matches no parameter "
                f"(re.search on names such as {sample}).",
                key="freeze.patterns",
            )

    decisions: dict[int, dict[str, bool]] = {}
    for name, tensor in named:
        frozen = component_of(name, layout) in frozen_components or matches_any(name, compiled)
        decisions.setdefault(tensor, {})[name] = frozen
    for names in decisions.values():
        if len(set(names.values())) > 1:
            # One tensor cannot be both frozen and trained.
            frozen_side = [n for n, f in names.items() if f]
            trained_side = [n for n, f in names.items() if not f]
            raise RecipeError(
                f"{', '.join(frozen_side)} and {', '.join(trained_side)} are the same tied "
                "tensor, but the freeze policy freezes only the first. Freeze both components "
                "(e.g. embeddings and lm_head) or neither.",
                key="freeze.components",
            )
    return decisions


def trained_components(
    inventory_or_names: ModelInventory | Iterable[str],
    *,
    layout: Layout | str,
    frozen: Sequence[str],
    patterns: Sequence[str] = (),
) -> list[str]:
    """Components of the model that the stage trains (any way: fully or through LoRA).

    A component counts when it is not in ``frozen`` and at least one of its parameters
    escapes the freeze patterns. Takes an inventory or parameter names.
    """
    validate_components(frozen, "freeze.components")
    compiled = compile_patterns(patterns)
    frozen_set = set(frozen)
    found = set()
    for name in _param_names(inventory_or_names):
        comp = component_of(name, layout)
        if comp not in frozen_set and not matches_any(name, compiled):
            found.add(comp)
    return [c for c in ALL_COMPONENTS if c in found]
