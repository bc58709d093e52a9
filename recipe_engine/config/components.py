"""Model components: which part of a model each parameter or module belongs to.

Pure functions over names (no torch import), so the planner can use them on names alone.
Every policy (freeze, LoRA, quantization, reports) speaks in these components. Which names
form which component is data: the built-in layouts in ``layouts.yaml``, or regexes a model
entry declares.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from recipe_engine.errors import RecipeError, did_you_mean

COMPONENTS = ("vision_tower", "projector", "language_model", "embeddings", "lm_head")
OTHER = "other"
#: Components in report order, with the catch-all last.
ALL_COMPONENTS = (*COMPONENTS, OTHER)


LAYOUTS_FILE = Path(__file__).with_name("layouts.yaml")
#: `model.layout: none` turns the built-in map off: parameters are selected by name only.
NO_LAYOUT = "none"


@dataclass(frozen=True)
class Layout:
    """How one model lays out its parameters: ``(component, regex)`` rules.

    Rules are tried in order with ``re.match`` on the canonical name; the first match wins,
    so nested parts (the projector inside Qwen2-VL's ``visual``, the embeddings inside the
    language model) come first. A layout with no rules (a model type without a map, and
    nothing declared) puts every parameter in ``other``: such a model is trained through
    ``freeze.patterns`` and explicit LoRA ``target_modules``.
    """

    name: str
    rules: tuple[tuple[str, str], ...]
    model_types: tuple[str, ...] = ()

    @property
    def mapped(self) -> bool:
        return bool(self.rules)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        """The inverse of ``dataclasses.asdict`` (plans and memo files hold layouts so)."""
        rules = tuple((str(c), str(rx)) for c, rx in data["rules"])
        return cls(str(data["name"]), rules, tuple(data.get("model_types") or ()))


def _rules(components: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    """``{component: regex or [regexes]}`` as ordered rules, each regex checked."""
    if not isinstance(components, Mapping):
        raise RecipeError(
            f"`{key}` must map components to regexes, e.g. {{vision_tower: 'model\\.vision'}}.",
            key=key,
        )
    rules = []
    for component, value in components.items():
        where = f"{key}.{component}"
        if component not in COMPONENTS:
            raise RecipeError(
                f"`{where}`: `{component}` is not a component."
                f"{did_you_mean(str(component), COMPONENTS)} Components: {', '.join(COMPONENTS)}.",
                key=where,
            )
        regexes = [value] if isinstance(value, str) else value
        if not isinstance(regexes, (list, tuple)) or not regexes:
            raise RecipeError(
                f"`{where}` must be a regex or a list of regexes over parameter names.", key=where
            )
        for rx in regexes:
            try:
                re.compile(rx)
            except (re.error, TypeError) as exc:
                raise RecipeError(
                    f"`{where}` entry {rx!r} is not a valid regex: {exc}.", key=where
                ) from None
            rules.append((str(component), str(rx)))
    return tuple(rules)


@cache
def known_layouts() -> dict[str, Layout]:
    """The built-in layouts, read from ``layouts.yaml`` (data, not code)."""
    data = OmegaConf.to_container(OmegaConf.load(LAYOUTS_FILE))
    assert isinstance(data, dict)
    return {
        name: Layout(name, _rules(entry["components"], name), tuple(entry["model_types"]))
        for name, entry in data.items()
    }


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
    declared = _rules(components, "model.components") if components else ()
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


def validate_components(names: Iterable[str], key: str) -> None:
    """Raise a RecipeError naming ``key`` for anything that is not a component name."""
    if names is None:  # `components: null` is neither "none" nor "the default": say which
        raise RecipeError(
            f"`{key}` is null. List the components (e.g. [language_model]), write [] for none, "
            f"or remove the key (~{key}) for the default.",
            key=key,
        )
    if isinstance(names, str):
        # A bare string would otherwise be iterated character by character.
        raise RecipeError(f"`{key}` must be a list of components, e.g. [{names}].", key=key)
    for name in names:
        if name not in ALL_COMPONENTS:
            raise RecipeError(
                f"Unknown component `{name}` in `{key}`.{did_you_mean(str(name), ALL_COMPONENTS)}"
                f" Components: {', '.join(ALL_COMPONENTS)}.",
                key=key,
            )


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
