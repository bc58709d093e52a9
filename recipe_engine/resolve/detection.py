"""What a split holds (its `Survey`) and how its rows are read (its `Layout`): `data.format` as
set, or detected from the columns by the formats' own declarations (`formats.REGISTRY`).

``datasets`` is imported only where a split is surveyed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.converters import json_messages
from recipe_engine.resolve.formats import (
    CANONICAL_COLUMNS,
    INPUT_FORMATS,
    PREFERENCE,
    REGISTRY,
    DataFormat,
    looks_sharegpt,
)
from recipe_engine.resolve.preference_rows import ANSWERS

# Rows read to learn the keys of conversations stored as JSON text (CSV cells, mixed types).
SURVEY_ROWS = 64
# Column names that usually hold what a canonical column holds (for the hints in errors).
LOOKS_LIKE = {
    "images": re.compile(r"im(a)?g|picture|photo", re.IGNORECASE),
    "prompt": re.compile(r"^(q|question|query|prompt|input|instruction|user|text)$", re.IGNORECASE),
    "completion": re.compile(
        r"^(a|answer|response|output|completion|target|label|reply)$", re.IGNORECASE
    ),
    "chosen": re.compile(r"^(chosen|preferred|accepted|better|good|winner)(_\w+)?$", re.I),
    "rejected": re.compile(r"^(rejected|dispreferred|worse|bad|loser)(_\w+)?$", re.I),
}
MESSAGE_KEYS = frozenset({"role", "content"})


# --------------------------------------------------------------------------- what a split holds


@dataclass(frozen=True)
class Survey:
    """What format detection sees of a split, read from its Arrow schema (and, for
    conversations stored as JSON text, its first rows)."""

    label: str
    names: tuple[str, ...]  # every column
    present: tuple[str, ...]  # columns with at least one value
    texts: tuple[str, ...]  # columns of plain text
    message_keys: Mapping[str, frozenset[str]]  # columns of conversations -> their message keys
    with_parts: frozenset[str]  # conversation columns where some content is a list of parts


def survey(ds: Any, label: str) -> Survey:
    names = tuple(ds.column_names)
    present = tuple(c for c in names if ds.data.column(c).null_count < ds.num_rows)
    keys: dict[str, frozenset[str]] = {}
    parts: set[str] = set()
    texts: list[str] = []
    for column in present:
        found = _conversation_keys(ds, column)
        if found is not None:
            keys[column], with_parts = found
            if with_parts:
                parts.add(column)
        elif _is_text(ds.features[column]):
            texts.append(column)
    return Survey(label, names, present, tuple(texts), keys, frozenset(parts))


def _is_text(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in ("string", "large_string")


def _conversation_keys(ds: Any, column: str) -> tuple[frozenset[str], bool] | None:
    """The message keys of a column of conversations and whether any content is a list
    of parts; None when the column holds something else."""
    import datasets

    feature = ds.features[column]
    lists = (datasets.List, datasets.LargeList)
    if isinstance(feature, dict) and MESSAGE_KEYS <= feature.keys():  # one message a row
        return frozenset(feature), isinstance(feature["content"], lists)
    if isinstance(feature, lists) and isinstance(feature.feature, dict):
        content = feature.feature.get("content")
        if isinstance(content, lists):
            return frozenset(feature.feature), True
        if not isinstance(content, datasets.Json):
            return frozenset(feature.feature), False
    elif not (
        _is_text(feature)
        or isinstance(feature, datasets.Json)
        or (isinstance(feature, lists) and isinstance(feature.feature, datasets.Json))
    ):
        return None
    # Conversations as JSON text (CSV cells) or with mixed content types: look at rows.
    keys: set[str] = set()
    with_parts = False
    for value in ds.select(range(min(SURVEY_ROWS, ds.num_rows)))[column]:
        messages = json_messages(value)
        if isinstance(messages, Mapping):
            messages = [messages]  # one message a row
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping):
                keys.update(k for k, v in message.items() if v is not None)
                with_parts |= isinstance(message.get("content"), list)
    return (frozenset(keys), with_parts) if keys else None


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """How a split's rows are read: the input format (`formats.REGISTRY`), the column behind
    every canonical name, and whether rows carry images."""

    fmt: str  # a name in formats.REGISTRY
    columns: Mapping[str, str]  # canonical name -> the split's column
    images: bool
    chat: bool = False  # plain prompt/completion text as one user and one assistant turn
    # The format's conversable columns hold messages (`DataFormat.conversable`): the chat
    # shape, whatever data.chat_template says.
    conversational: bool = False
    # No `prompt` column: the turns `chosen` and `rejected` share (`DataFormat.implicit`).
    implicit_prompt: bool = False

    @property
    def given(self) -> DataFormat:
        return REGISTRY[self.fmt]

    @property
    def output(self) -> str:
        """The row shape TRL gets (`formats.SHAPES`)."""
        return self.given.shapes.pick(self.images, self.chat or self.conversational).name

    def describe(self) -> str:
        with_images = self.images and not self.given.images  # `vlm` says so itself
        implicit = " (implicit prompt)" if self.implicit_prompt else ""
        return f"{self.fmt}{' with images' if with_images else ''}{implicit}"


def resolve_layout(setting: str, seen: Survey, mapping: Mapping[str, str]) -> Layout:
    """The layout for `data.format` = `setting` (auto: detected) and `data.columns`."""
    columns = {canon: mapping.get(canon, canon) for canon in CANONICAL_COLUMNS}
    _check_mapped_images(seen, mapping)
    conversation = _conversation_column(seen, mapping)
    given = _detect(seen, mapping, conversation) if setting == "auto" else REGISTRY[setting]
    if given.conversation:
        # Conversation formats read one column: the mapped one, `messages` or `conversations`.
        columns["messages"] = columns["conversations"] = conversation
    conversable = [columns[canon] for canon in given.conversable]
    images = (
        given.images
        or columns["images"] in seen.present
        or columns["messages"] in seen.with_parts
        or any(column in seen.with_parts for column in conversable)
    )
    return Layout(
        given.name,
        columns,
        images,
        conversational=any(
            MESSAGE_KEYS <= seen.message_keys.get(column, frozenset()) for column in conversable
        ),
        implicit_prompt=given.implicit is not None
        and given.implicit not in mapping
        and given.implicit not in seen.present,
    )


def _conversation_column(seen: Survey, mapping: Mapping[str, str]) -> str:
    for canon in ("messages", "conversations"):
        if canon in mapping:
            return mapping[canon]
    for canon in ("messages", "conversations"):
        if canon in seen.present:
            return canon
    return "messages"


def _check_mapped_images(seen: Survey, mapping: Mapping[str, str]) -> None:
    """Images are optional per row, so a mapping to a column that is not there would drop
    them all silently."""
    name = mapping.get("images")
    if name is not None and name not in seen.names:
        raise RecipeError(
            f"data.columns.images names `{name}`, but {seen.label} has no such column "
            f"(columns: {', '.join(seen.names)}). Map the column that holds the image paths.",
            key="data.columns.images",
        )


def detection_order() -> list[DataFormat]:
    """The formats `auto` tries, conversations first: a conversation column states the format
    before any other column does."""
    detected = [given for given in REGISTRY.values() if given.detected]
    return sorted(detected, key=lambda given: not given.conversation)


def _detect(seen: Survey, mapping: Mapping[str, str], conversation: str) -> DataFormat:
    def has(canon: str) -> bool:
        return canon in mapping or canon in seen.present

    def fits(given: DataFormat) -> bool:
        if not all(any(has(c) for c in group) for group in given.needs):
            return False
        return not given.conversation or given.message_keys(seen.message_keys.get(conversation))

    # Explicitly mapped columns state the intended format first, so a misspelt mapping gets the
    # row-level "`x` (data.columns.y) is missing" error instead of another format's.
    for explicit in (True, False):
        for given in detection_order():
            if fits(given) and (not explicit or any(n in mapping for n in given.columns)):
                return given
    raise _half_there(seen, mapping) or _undetectable(seen)


def _half_there(seen: Survey, mapping: Mapping[str, str]) -> RecipeError | None:
    """A format whose own columns (no other format's) are partly there: the ones missing
    named, rather than the list of every format (`prompt`+`chosen` lacks `rejected`)."""
    for given in detection_order():
        others = {c for other in REGISTRY.values() if other is not given for c in other.columns}
        there = [[c for c in group if c in mapping or c in seen.present] for group in given.needs]
        found = [c for columns in there for c in columns if c not in others]
        missing = [
            group[0] for group, columns in zip(given.needs, there, strict=True) if not columns
        ]
        if found and missing:
            named = ", ".join(f"`{mapping.get(c, c)}`" for c in found)
            lacking = " and ".join(f"`{c}`" for c in missing)
            maps = " ".join(f"data.columns.{c}=<name>" for c in missing)
            return RecipeError(
                f"{seen.label} has {named} but no {lacking} column (columns: "
                f"{', '.join(seen.present) or 'none'}): {given.expected} rows need it. "
                f"Add it, or map your column with {maps}.",
                key=f"data.columns.{missing[0]}",
            )
    return None


def _undetectable(seen: Survey) -> RecipeError:
    hints = _hints(seen)
    detected = f" Seen: {'; '.join(hints)}." if hints else ""
    *expected, last = [given.expected for given in detection_order()]
    return RecipeError(
        f"{seen.label}: cannot tell the data format from its columns "
        f"({', '.join(seen.present) or 'none'}).{detected} Expected {', '.join(expected)}, "
        f"or {last}; an `images` column adds images. Map your columns "
        "with data.columns.<name>=<your column> (names: "
        f"{', '.join(CANONICAL_COLUMNS)}) and, if needed, set "
        f"data.format=<{'|'.join(INPUT_FORMATS)}>.",
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
    texts = [c for c in seen.texts if not LOOKS_LIKE["images"].search(c) and c not in pair]
    prompt = next((c for c in texts if LOOKS_LIKE["prompt"].match(c)), texts[0] if texts else None)
    rest = [c for c in texts if c != prompt]
    answer = next((c for c in rest if LOOKS_LIKE["completion"].match(c)), rest[0] if rest else None)
    if prompt and answer:
        hints.append(
            f"text columns `{prompt}`, `{answer}`: for prompt/completion rows "
            f"data.columns.prompt={prompt} data.columns.completion={answer}"
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
