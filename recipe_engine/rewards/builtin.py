"""The built-in rule rewards (`stage.<name>.rewards: [{name: exact_match}, ...]`).

Each is a reward function as TRL's online trainers call one: `(prompts, completions,
completion_ids, **columns)` to one float per completion. A completion is text, or (chat
prompts) a list of messages whose last is the answer. Options come from the reward's entry
(`column`, `pattern`, `max_length`) and are bound by `rewards.load`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

from recipe_engine.plugins import Registry


def answer_text(completion: Any) -> str:
    """The generated answer of one completion, as text."""
    if isinstance(completion, list):
        last = completion[-1] if completion else {}
        content = last.get("content", "") if isinstance(last, dict) else last
        if isinstance(content, list):  # parts
            return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
        return str(content)
    return str(completion)


def _references(column: str, columns: dict[str, Any], count: int) -> Sequence[Any]:
    values = columns.get(column)
    if values is None:
        raise KeyError(
            f"the rows have no `{column}` column (columns the rewards get: "
            f"{', '.join(k for k in columns if not k.startswith(('trainer_', 'log_'))) or 'none'})"
        )
    return values if len(values) == count else [values[0]] * count


def exact_match(
    prompts: list[Any], completions: list[Any], *, column: str = "answer", **columns: Any
) -> list[float]:
    """1 where the answer, stripped, is the reference in `column`, stripped; else 0."""
    references = _references(column, columns, len(completions))
    return [
        float(answer_text(c).strip() == str(r).strip())
        for c, r in zip(completions, references, strict=True)
    ]


def contains(
    prompts: list[Any], completions: list[Any], *, column: str = "answer", **columns: Any
) -> list[float]:
    """1 where the answer contains the reference in `column`; else 0."""
    references = _references(column, columns, len(completions))
    return [
        float(str(r).strip() in answer_text(c))
        for c, r in zip(completions, references, strict=True)
    ]


def format_match(
    prompts: list[Any], completions: list[Any], *, pattern: str = ".*", **columns: Any
) -> list[float]:
    """1 where the whole answer, stripped, matches the regular expression `pattern`; else 0."""
    compiled = re.compile(pattern, re.DOTALL)
    return [float(compiled.fullmatch(answer_text(c).strip()) is not None) for c in completions]


def length_penalty(
    prompts: list[Any], completions: list[Any], *, max_length: int = 64, **columns: Any
) -> list[float]:
    """0 for an answer of at most `max_length` characters, less by the share it runs over
    (an answer twice as long: -1)."""
    return [-max(len(answer_text(c)) - max_length, 0) / max_length for c in completions]


# name in a recipe -> (function, the options of the reward entry it takes)
OWN = {
    "exact_match": (exact_match, ("column",)),
    "contains": (contains, ("column",)),
    "format": (format_match, ("pattern",)),
    "length_penalty": (length_penalty, ("max_length",)),
}


def _broken(function: Any) -> str | None:
    """What a plug-in's reward gets wrong of TRL's calling convention (None: nothing)."""
    if not callable(function):
        return f"is a {type(function).__name__}, not a function"
    parameters = inspect.signature(function).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return (
            "takes no `**kwargs`: TRL calls a reward with the rows' columns as keyword "
            "arguments, (prompts, completions, completion_ids, **columns)"
        )
    return None


# The engine's rules, then plug-ins' rewards (`plugins`: taken when first read), called by their
# entry point's name; a plug-in's takes no options.
BUILTIN: Mapping[str, tuple[Any, tuple[str, ...]]] = Registry(
    "rewards", OWN, _broken, entry=lambda p: (p.name, (p.value, ()))
)
