"""An online stage's rewards: what each entry of `stage.<name>.rewards` names, found, checked
on a row and hashed.

An entry names a built-in rule (`builtin.BUILTIN`) or a function of yours by import path
(`package.module:function`) or file (`path/to/file.py:function`, as ms-swift and Axolotl
spell them), read from where the engine runs. `plan` finds each (`find`), calls it as TRL
will on a sample of the stage's rows (`check_on_rows`), and hashes its module's source into the
stage key (`Reward.source_digest`); `run` finds it again and refuses a source that changed.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.rewards import builtin
from recipe_engine.user_code import find_function, module_digest

RewardFunction = Callable[..., Sequence[float | None]]
SIGNATURE = "fn(prompts, completions, completion_ids, **columns) -> list[float]"


@dataclass(frozen=True)
class Reward:
    """One reward as planned: what it calls and how much it counts."""

    label: str  # its name in TRL's logs (rewards/<label>/mean) and in `plan`
    target: str  # a built-in name, `module:function` or `file.py:function`
    weight: float
    options: tuple[tuple[str, Any], ...]  # a built-in's options (column, pattern, ...)
    source_digest: str  # sha256 of the source of the module that defines it
    key: str  # `stage.<name>.rewards[i]`, for messages

    @property
    def builtin(self) -> bool:
        return self.target in builtin.BUILTIN

    def load(self) -> RewardFunction:
        """The function as TRL calls it (`load`)."""
        return load(self)


def planned_rewards(stage: str, entries: Sequence[Any]) -> tuple[Reward, ...]:
    """The stage's reward entries (`config.schema.RewardConfig`s, or the same as plain data),
    each found and hashed."""
    given = [dataclasses.asdict(e) if dataclasses.is_dataclass(e) else e for e in entries]
    rewards = tuple(_planned(f"stage.{stage}.rewards[{i}]", e) for i, e in enumerate(given))
    seen: dict[str, str] = {}
    for reward in rewards:
        if reward.label in seen:
            raise RecipeError(
                f"`{seen[reward.label]}` and `{reward.key}` are both called `{reward.label}`, "
                "and TRL logs each reward under its name. Keep one, or give one a function of "
                "another name.",
                key=reward.key,
            )
        seen[reward.label] = reward.key
    return rewards


def _planned(key: str, entry: Mapping[str, Any]) -> Reward:
    name, fn, weight = entry.get("name"), entry.get("fn"), float(entry.get("weight", 1.0))
    if (name is None) == (fn is None):
        raise RecipeError(
            f"`{key}` must set one of `name` (a built-in reward: {', '.join(builtin.BUILTIN)}) "
            "or `fn` (your function: `package.module:function` or `file.py:function`).",
            key=key,
        )
    if name is not None:
        if name not in builtin.BUILTIN:
            raise RecipeError(
                f"`{key}.name` is {name!r}, not a built-in reward."
                f"{did_you_mean(name, list(builtin.BUILTIN))} Built-in rewards: "
                f"{', '.join(builtin.BUILTIN)}; your own function goes in `fn`.",
                key=f"{key}.name",
            )
        function, taken = builtin.BUILTIN[name]
        options = tuple(
            (option, entry[option]) for option in taken if entry.get(option) is not None
        )
        _check_options(key, name, options)
        return Reward(name, name, _weight(key, weight), options, module_digest(function), key)
    function = find_function(key, fn)
    return Reward(function.__name__, fn, _weight(key, weight), (), module_digest(function), key)


def _check_options(key: str, name: str, options: tuple[tuple[str, Any], ...]) -> None:
    given = dict(options)
    if name == "format" and "pattern" not in given:
        raise RecipeError(
            f"`{key}` is the format reward but sets no `pattern`: add {key}.pattern=<regex> "
            "(the whole answer must match it).",
            key=f"{key}.pattern",
        )
    if "pattern" in given:
        import re

        try:
            re.compile(given["pattern"])
        except re.error as error:
            raise RecipeError(
                f"`{key}.pattern` is not a regular expression: {error}.", key=f"{key}.pattern"
            ) from None
    if "max_length" in given and int(given["max_length"]) < 1:
        raise RecipeError(f"`{key}.max_length` must be 1 or more.", key=f"{key}.max_length")


def _weight(key: str, weight: float) -> float:
    if not math.isfinite(weight):
        raise RecipeError(f"`{key}.weight` must be a finite number.", key=f"{key}.weight")
    return float(weight)


def load(reward: Reward) -> RewardFunction:
    """The function as TRL calls it, named for TRL's logs; refused where its source changed
    since the plan (the stage key hashed that source)."""
    if reward.builtin:
        function, _ = builtin.BUILTIN[reward.target]
        bound = functools.partial(function, **dict(reward.options))
        called: Any = functools.update_wrapper(bound, function)
    else:
        called = find_function(reward.key, reward.target)
    now = module_digest(builtin.BUILTIN[reward.target][0] if reward.builtin else called)
    if now != reward.source_digest:
        raise RecipeError(
            f"`{reward.key}` ({reward.target}) changed since the stage was planned, so its "
            "key no longer names what would train. Run the recipe again: it plans anew.",
            key=reward.key,
        )
    called.__name__ = reward.label
    return called


def check_on_rows(stage: str, reward: Reward, rows: Sequence[Mapping[str, Any]]) -> None:
    """Call the reward as TRL will, on two answers to each sample row's prompt (its reference
    answer, where the row has one, and an empty one): it takes TRL's arguments and returns one
    finite number (or None: "does not apply") per completion."""
    function = load(reward)
    for row in rows:
        prompts, completions, columns = _sample_call(row)
        try:
            inspect.signature(function).bind(
                prompts=prompts, completions=completions, completion_ids=[[], []], **columns
            )
        except TypeError as error:
            raise RecipeError(
                f"`{reward.key}` ({reward.target}) cannot be called as TRL calls a reward, "
                f"{SIGNATURE} (the columns: {', '.join(columns)}): {error}. Take `**kwargs` "
                "for the columns you do not read.",
                key=reward.key,
            ) from None
        try:
            scores = function(
                prompts=prompts, completions=completions, completion_ids=[[], []], **columns
            )
        except Exception as error:  # the user's function failed on a real row
            raise RecipeError(
                f"`{reward.key}` ({reward.target}) failed on a row of stage `{stage}`'s data "
                f"with {type(error).__name__}: {error}",
                key=reward.key,
            ) from None
        _check_scores(reward, scores, len(completions))


def _sample_call(row: Mapping[str, Any]) -> tuple[list[Any], list[Any], dict[str, Any]]:
    prompt = row["prompt"]
    answers = [str(row.get("answer") or ""), ""]
    chat = isinstance(prompt, list)
    completions = [[{"role": "assistant", "content": a}] if chat else a for a in answers]
    columns = {k: [v, v] for k, v in row.items() if k not in ("prompt", "images")}
    if "images" in row:
        columns["images"] = [row["images"], row["images"]]
    columns |= {"trainer_state": None, "log_extra": _ignored, "log_metric": _ignored}
    return [prompt, prompt], completions, columns


def _ignored(*args: Any, **kwargs: Any) -> None:
    """TRL's `log_extra` / `log_metric` callbacks, which a sample call logs nothing with."""


def _check_scores(reward: Reward, scores: Any, expected: int) -> None:
    what = f"`{reward.key}` ({reward.target})"
    try:
        values = list(scores)
    except TypeError:
        values = None
    if values is None or len(values) != expected:
        got = f"{len(values)} value(s)" if values is not None else type(scores).__name__
        raise RecipeError(
            f"{what} returned {got} for {expected} completions; a reward returns one number "
            "per completion (None where it does not apply).",
            key=reward.key,
        )
    for value in values:
        if value is None:
            continue
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RecipeError(
                f"{what} returned {value!r} for a completion; a reward returns a finite number "
                "per completion (None where it does not apply), never NaN or infinity.",
                key=reward.key,
            )
