"""Model components, declared: the components a recipe's keys name (`COMPONENTS`), and which
names form which component in each built-in layout (``layouts.yaml``, read as `Layout`s).
Deciding a model's layout and which component a name belongs to is planning
(`plan.components`)."""

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


def declared_rules(components: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
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
        name: Layout(name, declared_rules(entry["components"], name), tuple(entry["model_types"]))
        for name, entry in data.items()
    }


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
