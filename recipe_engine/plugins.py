"""Plug-ins from a user's own package: Python entry points (`importlib.metadata`), one group for
each thing that varies, `recipe_engine.<group>`:

- `recipe_engine.trainers`: a `trainers.kind.TrainerKind` (its name a new `trainer:` value);
- `recipe_engine.rewards`: a reward function, as TRL calls one (a new built-in name for
  `stage.<name>.rewards: [{name: ...}]`);
- `recipe_engine.formats`: a `resolve.formats.DataFormat` (a new `data.format`);
- `recipe_engine.launchers`: a `launchers.kinds.LauncherKind` (a new `launcher=`).

A package declares them in its own pyproject.toml; installed where the engine runs, they join
the engine's own (`--help` and `plan` list them), and the source of the module each comes
from is keyed into every stage that uses it, as a reward's is: an edited plug-in retrains what
it trained. What breaks a group's protocol (it does not load, or is not what the group takes,
or takes a name the engine has) is one message naming the entry point, its package and the
fix.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from recipe_engine.errors import RecipeError
from recipe_engine.user_code import source_digest

PREFIX = "recipe_engine."  # a group's entry points are `recipe_engine.<group>`


@dataclass(frozen=True)
class Plugin:
    """One entry point's object, where it came from and its code's content."""

    group: str  # trainers, rewards, formats or launchers
    name: str  # the entry point's name: the value recipes use
    target: str  # `package.module:attribute`
    distribution: str  # the installed package that declares it
    version: str
    digest: str  # sha256 of the source of the module that defines it
    value: Any

    def describe(self) -> str:
        return f"{self.name} ({self.distribution} {self.version})"


@functools.cache
def _loaded(group: str, check: Callable[[Any], str | None]) -> tuple[Plugin, ...]:
    found = []
    for entry in metadata.entry_points(group=f"{PREFIX}{group}"):
        dist, version = _package(entry)
        where = (
            f"`{entry.value}` (entry point `{entry.name}` in group `{entry.group}` of "
            f"{dist} {version})"
        )
        try:
            value = entry.load()
        except Exception as error:  # the user's package failed as it was imported
            raise refusal(where, dist, f"does not load: {type(error).__name__}: {error}") from None
        problem = check(value)
        if problem is not None:
            raise refusal(where, dist, problem)
        digest = source_digest(importlib.import_module(entry.module))
        found.append(Plugin(group, entry.name, entry.value, dist, version, digest, value))
    return tuple(found)


def refusal(where: str, dist: str, problem: str) -> RecipeError:
    return RecipeError(
        f"The plug-in {where} {problem}. Fix the package, or uninstall it "
        f"(pip uninstall {dist}); docs/plugins.md says what each group takes.",
        key="plug-ins",
    )


def code_of(group: str, name: str) -> str | None:
    """The digest of the plug-in that gives `name` in `group` (None: none does: the engine's
    own), keyed into the stages that use it."""
    plugin = used_by(group, name)
    return plugin.digest if plugin else None


def listing() -> str:
    """The installed plug-ins in one line per group, as `--help` and `plan` list them ("":
    none), read from the packages' metadata: nothing is imported to list them."""
    named: dict[str, list[str]] = {}
    for dist in metadata.distributions():
        for entry in dist.entry_points:
            if entry.group.startswith(PREFIX):
                named.setdefault(entry.group.removeprefix(PREFIX), []).append(
                    f"{entry.name} ({dist.name} {dist.version})"
                )
    return "; ".join(f"{group} {', '.join(names)}" for group, names in sorted(named.items()))


def _package(entry: metadata.EntryPoint) -> tuple[str, str]:
    """The name and version of the installed package that declares `entry`."""
    return (entry.dist.name, entry.dist.version) if entry.dist else ("an unnamed package", "?")


def used_by(group: str, name: str) -> Plugin | None:
    """The plug-in that gives `name` in `group` (None: the engine's own)."""
    return next((plugin for plugin in _installed(group) if plugin.name == name), None)


def _installed(group: str) -> tuple[Plugin, ...]:
    return next((found for (g, _), found in _registered.items() if g == group), ())


# What each registry loaded, by (group, check): a group is loaded once a process.
_registered: dict[tuple[str, Callable[[Any], str | None]], tuple[Plugin, ...]] = {}


def register(group: str, check: Callable[[Any], str | None]) -> list[Plugin]:
    """The group's plug-ins for its registry, each loaded and checked (`check`: what is wrong
    with the object, None when nothing is), once a process, in the order the packages declare
    them; remembered for `used_by`."""
    found = _loaded(group, check)
    _registered[group, check] = found
    return list(found)


Value = TypeVar("Value")


class Registry(Mapping[str, Value], Generic[Value]):
    """A group's registry: the engine's own, then its plug-ins', taken when it is first read
    (never while the engine's modules import: a plug-in imports them too), each checked by
    `broken(object)` (what is wrong: None for nothing) and entered by `entry` (its name and
    value: by default the object's `name` and the object) under a name nothing else has, in
    the order `order` gives (the engine's own first, by default)."""

    def __init__(
        self,
        group: str,
        own: Mapping[str, Value],
        broken: Callable[[Any], str | None],
        entry: Callable[[Plugin], tuple[str, Value]] = lambda p: (p.value.name, p.value),
        order: Callable[[Value], Any] | None = None,
    ) -> None:
        self.group, self.own, self.broken = group, dict(own), broken
        self.entry, self.order = entry, order
        self._all: dict[str, Value] | None = None

    def _taken(self) -> dict[str, Value]:
        if self._all is None:
            found = {**self.own}
            for plugin in register(self.group, self.broken):
                name, value = self.entry(plugin)
                if name in found or name == "auto":
                    where = f"`{plugin.target}` ({plugin.distribution} {plugin.version})"
                    raise refusal(where, plugin.distribution, f"is called `{name}`, a name "
                                  f"{self.group} already have: give it another")  # fmt: skip
                found[name] = value
            if self.order is not None:
                found = dict(sorted(found.items(), key=lambda item: self.order(item[1])))
            self._all = found
        return self._all

    def __getitem__(self, name: str) -> Value:
        return self._taken()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._taken())

    def __len__(self) -> int:
        return len(self._taken())
