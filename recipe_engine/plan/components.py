"""Model components: which part of a model each parameter or module belongs to.

Pure functions over names (no torch import), so the planner can use them on names alone.
Every policy (freeze, LoRA, quantization, reports) speaks in these components. Which names
form which component is data (`config.components`): the built-in layouts in
``layouts.yaml``, or regexes a model entry declares; this module decides a model's layout
from them and matches names against it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from recipe_engine.config.components import (
    ALL_COMPONENTS,
    COMPONENTS,
    NO_LAYOUT,
    OTHER,
    Layout,
    declared_rules,
    known_layouts,
)
from recipe_engine.errors import RecipeError, did_you_mean


def layout_for(
    model_type: str, layout: str | None = None, components: Mapping[str, Any] | None = None
) -> Layout:
    """A model's layout: the named built-in one, else the one for its ``model_type``, with
    ``components`` (declared regexes) replacing that layout's rules for those components."""
    known = known_layouts()
    if layout == NO_LAYOUT and not components:
        return Layout(f"{model_type} ({NO_LAYOUT}: freeze.patterns and target_modules only)", ())
    if layout not in (None, NO_LAYOUT) and layout not in known:
        raise RecipeError(
            f"`model.layout` is {layout!r}, which is not a known layout."
            f"{did_you_mean(layout, known)} Known: {', '.join(known)}; `{NO_LAYOUT}` for "
            "none; or declare `model.components` as regexes.",
            key="model.layout",
        )
    base = known.get(layout or "")
    if layout is None:
        base = next((lay for lay in known.values() if model_type in lay.model_types), None)
    declared = declared_rules(components, "model.components") if components else ()
    if not declared:
        return base or Layout(f"{model_type} (no component map)", ())
    replaced = {component for component, _ in declared}
    inherited = tuple(r for r in (base.rules if base else ()) if r[0] not in replaced)
    name = f"{base.name} + declared" if base and inherited else "declared"
    return Layout(name, declared + inherited, (model_type,))


def no_map_hint(layout: Layout, what: str) -> str:
    """Why a component-based setting cannot apply to a model without a map, and the fix."""
    known = sorted(t for lay in known_layouts().values() for t in lay.model_types)
    model_type = layout.name.split(" ")[0]
    return (
        f"{what}: the model (type `{model_type}`) has no component map."
        f"{did_you_mean(model_type, known)}"
        " Declare its components in the model entry (model.components.vision_tower=<regex>, "
        "... or model.layout=<known layout>), or select parameters by name: "
        "`freeze.patterns` (regexes) and LoRA `target_modules` listed explicitly. "
        f"Known layouts: {', '.join(known_layouts())}."
    )


def report_layout(layout: Layout, patterns: Iterable[str]) -> Layout:
    """The groups a trainable report counts by: the components, or for a model without a
    map the user's own ``freeze.patterns`` (each regex a group, as `re.search` selects)."""
    if layout.mapped:
        return layout
    return Layout(layout.name, tuple((p, f".*?(?:{p})") for p in patterns))


def groups(layout: Layout) -> tuple[str, ...]:
    """A layout's report rows in order: the components (or patterns) it names, then other."""
    if layout.rules and all(c in COMPONENTS for c, _ in layout.rules):
        return ALL_COMPONENTS
    return (*dict.fromkeys(c for c, _ in layout.rules), OTHER)


def as_layout(layout: Layout | str) -> Layout:
    """A layout given as itself, a built-in layout's name or a model type."""
    if isinstance(layout, Layout):
        return layout
    known = known_layouts()
    return known[layout] if layout in known else layout_for(layout)


# PEFT, DDP and torch.compile wrap names; components are decided on the unwrapped name.
_PREFIXES = ("base_model.model.", "module.", "_orig_mod.")
_SEGMENTS = re.compile(r"\.(modules_to_save\.[^.]+|original_module|base_layer)(?=\.|$)")


def canonical_name(name: str) -> str:
    """The parameter/module name as in the bare transformers model.

    Strips ``base_model.model.`` (PeftModel), ``module.`` (DDP), ``_orig_mod.``
    (torch.compile) and the ``modules_to_save.<adapter>`` / ``original_module`` /
    ``base_layer`` segments PEFT inserts. LoRA's own ``lora_A.<adapter>`` stays: it is
    a real parameter and belongs to the component of the layer it adapts.
    """
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                stripped = True
    return _SEGMENTS.sub("", name)


@cache
def _compiled(layout: Layout) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((component, re.compile(rx)) for component, rx in layout.rules)


def component_of(name: str, layout: Layout | str) -> str:
    """The component of a parameter or module name, or ``"other"`` when no rule matches.

    For a container module spanning several components (Qwen2-VL's ``model.visual``
    holds the projector) the answer is the outer rule's; decide on leaf names.
    """
    canonical = canonical_name(name)
    for component, rx in _compiled(as_layout(layout)):
        if rx.match(canonical):
            return component
    return OTHER


def covering_modules(
    names: Iterable[str], selected: Iterable[str], *, names_are_modules: bool
) -> tuple[list[str], list[str]]:
    """The fewest module names whose subtrees contain selected names only.

    ``names`` are all parameter names (``names_are_modules=False``) or module names of a
    model; ``selected`` is the subset to cover. Returns ``(modules, uncovered)``: the
    outermost modules holding nothing but selected names (used for PEFT
    ``modules_to_save`` and bitsandbytes ``llm_int8_skip_modules``), and the selected
    names no such module can hold (a parameter sitting directly on a mixed container).
    """
    names = [n for n in names if n]
    chosen = set(selected)
    candidates: set[str] = set()
    impure: set[str] = set()
    for name in names:
        # A parameter name's last segment is the tensor, not a module.
        prefixes = _prefixes(name, inclusive=names_are_modules)
        candidates.update(prefixes)
        if name not in chosen:
            impure.update(prefixes)
    pure = candidates - impure
    modules = sorted(p for p in pure if p.rpartition(".")[0] not in pure)
    present = set(names)
    uncovered = sorted(
        n for n in chosen & present if not any(p in pure for p in _prefixes(n, inclusive=True))
    )
    return modules, uncovered


def _prefixes(name: str, *, inclusive: bool) -> list[str]:
    parts = name.split(".")
    upto = len(parts) if inclusive else len(parts) - 1
    return [".".join(parts[:k]) for k in range(1, upto + 1)]
