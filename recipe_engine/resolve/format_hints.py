"""The refusals of a split whose format cannot be told from its columns: what each column looks
like, and the exact mapping (`data.columns.<canonical>=<column>`, `data.format=...`) that would
read it. A format that is half there names what is missing instead of listing every format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.formats import (
    REGISTRY,
    DataFormat,
    canonical_columns,
    input_formats,
    looks_sharegpt,
)
from recipe_engine.resolve.row_shapes import PREFERENCE, UNPAIRED
from recipe_engine.resolve.survey import Survey
from recipe_engine.trainers import trainer_for
from recipe_engine.trainers.kind import UNPAIRED_ROWS

# Column names that usually hold what a canonical column holds (for the hints in errors).
LOOKS_LIKE = {
    "images": re.compile(r"im(a)?g|picture|photo", re.IGNORECASE),
    "prompt": re.compile(r"^(q|question|query|prompt|input|instruction|user|text)$", re.IGNORECASE),
    "completion": re.compile(
        r"^(a|answer|response|output|completion|target|reply)$", re.IGNORECASE
    ),
    "chosen": re.compile(r"^(chosen|preferred|accepted|better|good|winner)(_\w+)?$", re.I),
    "rejected": re.compile(r"^(rejected|dispreferred|worse|bad|loser)(_\w+)?$", re.I),
    "label": re.compile(r"^(label|kto_tag|desirable|thumbs?_?up|is_good|feedback)$", re.I),
}
ANSWERS = ("chosen", "rejected")
FEEDBACK_TRAINER = trainer_for(UNPAIRED_ROWS)  # what `auto` trains unpaired feedback with


def half_there(
    seen: Survey, mapping: Mapping[str, str], order: Sequence[DataFormat]
) -> RecipeError | None:
    """A format whose own columns (no other format's) are partly there: the ones missing
    named, rather than the list of every format (`prompt`+`chosen` lacks `rejected`)."""
    for given in order:
        others = {c for other in REGISTRY.values() if other is not given for c in other.columns}
        there = [[c for c in group if _there(given, c, seen, mapping)] for group in given.needs]
        found = [c for columns in there for c in columns if c not in others]
        missing = [
            group[0] for group, columns in zip(given.needs, there, strict=True) if not columns
        ]
        if found and missing:
            named = ", ".join(f"`{_there(given, c, seen, mapping)}`" for c in found)
            lacking = " and ".join(f"`{c}`" for c in missing)
            maps = " ".join(f"data.columns.{c}=<name>" for c in missing)
            return RecipeError(
                f"{seen.label} has {named} but no {lacking} column (columns: "
                f"{', '.join(seen.present) or 'none'}): {given.expected} rows need it. "
                f"Add it, or map your column with {maps}.",
                key=f"data.columns.{missing[0]}",
            )
    return None


def _there(given: DataFormat, canon: str, seen: Survey, mapping: Mapping[str, str]) -> str:
    """The split's column for `canon` (mapped, as named, or under an alias), or ""."""
    if canon in mapping:
        return mapping[canon]
    names = (canon, *given.aliases.get(canon, ()))
    return next((name for name in names if name in seen.present), "")


def undetectable(seen: Survey, order: Sequence[DataFormat]) -> RecipeError:
    hints = _hints(seen)
    detected = f" Seen: {'; '.join(hints)}." if hints else ""
    *expected, last = [given.expected for given in order]
    return RecipeError(
        f"{seen.label}: cannot tell the data format from its columns "
        f"({', '.join(seen.present) or 'none'}).{detected} Expected {', '.join(expected)}, "
        f"or {last}; an `images` column adds images. Map your columns "
        "with data.columns.<name>=<your column> (names: "
        f"{', '.join(canonical_columns())}) and, if needed, set "
        f"data.format=<{'|'.join(input_formats())}>.",
        key="data.format",
    )


def _hints(seen: Survey) -> list[str]:
    """What each column looks like, with the mapping that would use it."""
    pair = _preference_pair(seen)
    hints = [_pair_hint(seen, pair)] if pair else []
    for column, keys in seen.message_keys.items():
        if column in pair:
            continue
        if looks_sharegpt(keys):
            hints.append(
                f"`{column}` holds ShareGPT messages (`from`/`value` keys): "
                f"data.columns.conversations={column} (data.format=sharegpt)"
            )
        elif {"role", "content"} <= keys:
            hints.append(f"`{column}` holds role/content messages: data.columns.messages={column}")
    for column in seen.present:
        if LOOKS_LIKE["images"].search(column) and column not in seen.message_keys:
            hints.append(f"`{column}` looks like images: data.columns.images={column}")
    label = next((c for c in seen.present if LOOKS_LIKE["label"].match(c)), None)
    texts = [c for c in seen.texts if not LOOKS_LIKE["images"].search(c) and c not in pair]
    prompt = next((c for c in texts if LOOKS_LIKE["prompt"].match(c)), texts[0] if texts else None)
    rest = [c for c in texts if c != prompt and c != label]
    answer = next((c for c in rest if LOOKS_LIKE["completion"].match(c)), rest[0] if rest else None)
    if prompt and answer:
        mapped = f"data.columns.prompt={prompt} data.columns.completion={answer}"
        hints.append(f"text columns `{prompt}`, `{answer}`: for prompt/completion rows {mapped}")
        if label:
            hints.append(
                f"`{label}` looks like feedback on each answer: {mapped} "
                f"data.columns.label={label} (data.format={UNPAIRED}, "
                f"for trainer={FEEDBACK_TRAINER})"
            )
    return hints


def _preference_pair(seen: Survey) -> tuple[str, ...]:
    """Columns named like a chosen and a rejected answer (`good`, `bad`), or none."""
    found = [next((c for c in seen.present if LOOKS_LIKE[k].match(c)), "") for k in ANSWERS]
    return tuple(found) if all(found) else ()


def _pair_hint(seen: Survey, pair: tuple[str, ...]) -> str:
    prompt = next(
        (c for c in seen.present if LOOKS_LIKE["prompt"].match(c) and c not in pair), None
    )
    mapping = [
        f"data.columns.{canon}={column}" for canon, column in zip(ANSWERS, pair, strict=True)
    ]
    if prompt:
        mapping.insert(0, f"data.columns.prompt={prompt}")
    return (
        f"`{pair[0]}`, `{pair[1]}` look like a preference pair (chosen, rejected): "
        f"{' '.join(mapping)} (data.format={PREFERENCE})"
    )
