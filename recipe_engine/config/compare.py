"""`compare`'s own keys as a typed structured config, composed by Hydra with the engine's.

`compare run=DIR probes=FILE tasks=[...] harness.limit=N` and `compare recipes=[A,B]
seeds=[0,1,2]` set top-level keys beside the engine's own (`recipe=`, `eval.*`,
`output_root=` ...). The `compare` root config is the engine's root config with
`CompareConfig` (the engine's schema and `CompareOptions`) over it, so Hydra parses the lists,
checks the types, and a misspelt key is refused with the engine's unknown-key message, which
lists compare's keys too. What the keys mean together (recipes= with tasks=, ...) is checked
here; what their values name (recipes, files, tasks) is checked by the layers that use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser

from recipe_engine.config.compose import (
    CONFIG_NAME,
    check_overrides,
    compose_config,
    to_engine_config,
    translate_error,
)
from recipe_engine.config.schema import EngineConfig, EvalConfig
from recipe_engine.errors import RecipeError

COMPARE_CONFIG = "compare"


@dataclass
class HarnessOptions:
    """`harness.*`: how `compare tasks=[...]` runs EleutherAI's lm-evaluation-harness."""

    # Documents per task: a positive number, or `all`; unset, the engine's fixed default
    # (store.scores.DEFAULT_LIMIT) so that runs compare. Text, since `all` is a word.
    limit: str | None = None
    include_path: str | None = None  # a folder of the user's own task YAML files

    @property
    def given(self) -> bool:
        return self.limit is not None or self.include_path is not None


def _list(example: str) -> Any:
    """A list option, unset by default; `example` is what the refusal of a wrong value shows."""
    return field(default=None, metadata={"example": example})


@dataclass
class CompareOptions:
    """compare's own keys; none of them reaches a recipe's config."""

    run: str | None = None  # the run folder to compare (default: the newest of recipe=NAME)
    probes: str | None = None  # a file of probe rows (default: the run's held-out rows)
    tasks: list[str] | None = _list("a list of task names, e.g. tasks=[recipe_arith]")
    harness: HarnessOptions = field(default_factory=HarnessOptions)
    recipes: list[str] | None = _list(
        "a list of recipe names, e.g. recipes=[r1-llm-only,r3-two-stage]"
    )
    seeds: list[int] | None = _list("a list of integers, e.g. seeds=[0,1,2]")
    # Read the passes the run made of its models itself (its measured/ folder) where they
    # answered the same probes, as the comparison that ends a run does, instead of loading them.
    run_passes: bool = False


@dataclass
class CompareConfig(CompareOptions, EngineConfig):
    """The schema of the `compare` root: the engine's keys, then compare's own."""


OWN_KEYS = tuple(option.name for option in fields(CompareOptions))


def register_compare_config() -> None:
    """The `compare` root: the engine's root config (its groups and their defaults), then
    compare's schema over it."""
    store = ConfigStore.instance()
    store.store(name="compare_schema", node=CompareConfig)
    store.store(name=COMPARE_CONFIG, node={"defaults": [CONFIG_NAME, "compare_schema", "_self_"]})


@dataclass(frozen=True)
class CompareRequest:
    """What `compare` was asked: its own options, the engine's config they came with, and the
    engine's overrides as given (a recipe-vs-recipe experiment composes each recipe with
    them)."""

    options: CompareOptions
    config: EngineConfig
    overrides: list[str]
    extra_dirs: list[str]

    def eval_settings(self) -> EvalOverrides:
        """The `eval.*` keys set on the command line: they win over a run's own settings."""
        given = (key.removeprefix("eval.") for key in override_keys(self.overrides))
        return EvalOverrides(self.config.eval, frozenset(given) & _EVAL_KEYS)


_EVAL_KEYS = frozenset(setting.name for setting in fields(EvalConfig))


@dataclass(frozen=True)
class EvalOverrides:
    """Eval settings that win over a finished run's own: the `keys` of `values` (those given
    on compare's command line; every key after a run, which knows its own settings)."""

    values: EvalConfig
    keys: frozenset[str]

    @classmethod
    def of(cls, **given: Any) -> EvalOverrides:
        """These settings (EvalConfig's keys) and no others."""
        return cls(EvalConfig(**given), frozenset(given))

    @classmethod
    def every(cls, settings: EvalConfig) -> EvalOverrides:
        return cls(settings, _EVAL_KEYS)

    def over(self, settings: EvalConfig) -> EvalConfig:
        """`settings` with the overridden keys replaced."""
        return replace(settings, **{key: getattr(self.values, key) for key in self.keys})


def compose_compare(overrides: list[str], extra_dirs: list[str]) -> CompareRequest:
    """compare's command line composed by Hydra (its lists parsed, every key and type
    checked), split into compare's options and the engine's config."""
    register_compare_config()
    check_overrides(overrides, extra_dirs)  # a missing `=`, an unknown group option
    keys = override_keys(overrides)
    # With recipes=, a stage override is for the recipes that have the stage: each recipe's
    # own composition checks it (evaluate.experiment_jobs), not the default recipe's here.
    for_recipes = "recipes" in keys
    here = [o for o, k in zip(overrides, keys, strict=True) if not (for_recipes and _stage(k))]
    try:
        composed = compose_config(here, extra_dirs=extra_dirs, config_name=COMPARE_CONFIG)
    except RecipeError as error:
        raise _with_example(error) from None
    both = to_engine_config(composed)
    options = CompareOptions(**{f.name: getattr(both, f.name) for f in fields(CompareOptions)})
    config = EngineConfig(**{f.name: getattr(both, f.name) for f in fields(EngineConfig)})
    engine = [o for o, key in zip(overrides, keys, strict=True) if _root(key) not in OWN_KEYS]
    check_together(options, set(keys))
    return CompareRequest(options, config, engine, list(extra_dirs))


def override_keys(overrides: list[str]) -> list[str]:
    """Each override's key, as Hydra's grammar reads it (`++stage.llm.train.x=1`:
    `stage.llm.train.x`)."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as error:  # Hydra's grammar errors carry the offending override
        raise translate_error(error) from None
    return [override.key_or_group for override in parsed]


def _stage(key: str) -> bool:
    return key.startswith("stage.")


def _root(key: str) -> str:
    return key.split(".", 1)[0]


def _with_example(error: RecipeError) -> RecipeError:
    """A list option's wrong value refused with what it takes (`seeds=[x]`)."""
    root = _root(error.key or "").split("[", 1)[0]
    option = next((f for f in fields(CompareOptions) if f.name == root), None)
    if option is None or "example" not in option.metadata:
        return error
    return RecipeError(f"{error} (`{root}=` takes {option.metadata['example']}.)", key=root)


def check_together(options: CompareOptions, keys: set[str]) -> None:
    """The keys that belong to one kind of comparison: one run's (run=, tasks=, harness.*)
    or recipes' (recipes=, seeds=)."""
    if options.tasks is None and options.harness.given:
        raise RecipeError("harness.* settings need tasks=[...] to run.", key="tasks")
    if options.recipes is None:
        if options.seeds is not None:
            raise RecipeError(
                "seeds=[...] repeats a recipe-vs-recipe experiment (recipes=[A,B]); one run "
                "is compared with its own seed.",
                key="seeds",
            )
        return
    if options.tasks is not None:
        raise RecipeError(
            "tasks= scores one run's stages (compare recipe=NAME or run=DIR tasks=[...]), "
            "not recipes=[...].",
            key="tasks",
        )
    if options.run is not None:
        raise RecipeError(
            "run= compares the stages of one finished run; recipes=[...] trains and compares "
            "recipes. Pass one of them.",
            key="run",
        )
    if "recipe" in keys:
        raise RecipeError("`recipes=` names the recipes; drop `recipe=`.", key="recipe")
    if "seed" in keys and options.seeds is not None:
        raise RecipeError("Pass `seeds=[...]` or `seed=N`, not both.", key="seed")
