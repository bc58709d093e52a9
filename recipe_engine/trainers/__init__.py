"""The trainers a stage can train with (`stage.<name>.trainer`): one module per kind.

Each `trainers/<kind>.py` declares its `KIND` (a `kind.TrainerKind`); the registry finds
them, so adding a kind is adding its module. Outside this package no module names a kind:
the layers ask the stage's kind (`trainer_named`) what differs.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from recipe_engine.capabilities import Capability
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.plugins import Registry
from recipe_engine.trainers.kind import ROW_KINDS, ROWS_IN_WORDS, TrainerKind

# A stage left at `auto` trains with the first kind that takes its rows (`trainer_for`).
AUTO = "auto"
NOT_KINDS = {"kind", "online"}  # modules of the package that declare no kind


def _declared() -> dict[str, TrainerKind]:
    """The engine's kinds, a module each, by rank."""
    kinds = [
        importlib.import_module(f"{__name__}.{module.name}").KIND
        for module in pkgutil.iter_modules(__path__)
        if module.name not in NOT_KINDS
    ]
    return {kind.name: kind for kind in sorted(kinds, key=lambda kind: kind.rank)}


def _broken(kind: Any) -> str | None:
    """What a plug-in's kind gets wrong of the protocol (None: nothing)."""
    if not isinstance(kind, TrainerKind):
        return f"is a {type(kind).__name__}, not a TrainerKind (recipe_engine.trainers.kind)"
    if kind.rows not in ROW_KINDS:
        return f"takes rows `{kind.rows}`, not one of {', '.join(ROW_KINDS)}"
    return None


OWN = _declared()
# The engine's kinds, then those of plug-ins (`plugins`: taken when first read), by rank.
TRAINERS: Mapping[str, TrainerKind] = Registry("trainers", OWN, _broken, order=lambda k: k.rank)
# The kind every record written before trainers were a choice trained with, and the one whose
# settings stand for an evaluation stage (it trains nothing): the first to take instructions.
DEFAULT = next(kind for kind in OWN.values() if kind.demonstrations)


def known_capabilities() -> list[Capability]:
    """Every capability a kind has, once each (by name), in the order the kinds list them."""
    found: dict[str, Capability] = {}
    for kind in TRAINERS.values():
        for capability in kind.capabilities:
            found.setdefault(capability.name, capability)
    return list(found.values())


def kinds_having(capability: Capability) -> list[str]:
    """The kinds that have `capability` (by name), in the order they are listed."""
    return [
        kind.name
        for kind in TRAINERS.values()
        if any(own.name == capability.name for own in kind.capabilities)
    ]


def trainers_taking(rows: str) -> list[str]:
    """The trainers that learn from this kind of rows, in the order they are listed."""
    return [kind.name for kind in TRAINERS.values() if kind.rows == rows]


def trainer_for(rows: str) -> str:
    """The trainer a stage left at `auto` learns from these rows with."""
    return trainers_taking(rows)[0]


def trainer_named(name: str | None) -> TrainerKind:
    """The kind a stage or a record names (none named: the default one's)."""
    return TRAINERS[name] if name is not None else DEFAULT


def trainer_of(config: Mapping[str, Any] | None) -> TrainerKind:
    """The kind a stage's recorded settings (a manifest's `config`) trained with; a record
    from before trainers were a choice names none and trained with the default."""
    return trainer_named((config or {}).get("trainer"))


def trainer_kinds(name: str, stage: str) -> list[TrainerKind]:
    """The trainers `stage.<stage>.trainer` may mean: the one it names, or with `auto` every
    one (its rows choose later); an unknown name is one message."""
    if name == AUTO:
        return list(TRAINERS.values())
    if name in TRAINERS:
        return [TRAINERS[name]]
    key = f"stage.{stage}.trainer"
    names = [AUTO, *TRAINERS]
    by_rows = "; ".join(
        f"{', '.join(trainers_taking(rows))}: {words}"
        for rows, words in ROWS_IN_WORDS.items()
        if trainers_taking(rows)
    )
    raise RecipeError(
        f"`{key}` is {name!r}, which is not a trainer the engine has.{did_you_mean(name, names)}"
        f" Trainers: {', '.join(names)} (auto: the one the rows call for; {by_rows}).",
        key=key,
    )
