"""What a split holds, as format detection sees it (its `Survey`): its columns, the message
keys of its conversation columns, the content parts that are images, the text columns that are
whole dialogues, the columns whose text names images with Qwen-VL's `<img>` tags. Read from the
Arrow schema, and from rows where the schema cannot say (conversations stored as JSON text,
parts of mixed keys).

``datasets`` and ``pyarrow`` are imported only where a split is surveyed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.resolve.converters import json_messages
from recipe_engine.resolve.parts import IMAGE_TAG
from recipe_engine.resolve.prompt_turns import hh_messages

# Rows read to learn the keys of conversations stored as JSON text (CSV cells, mixed types).
SURVEY_ROWS = 64
MESSAGE_KEYS = frozenset({"role", "content"})
SHAREGPT_KEYS = frozenset({"from", "value"})
IMAGE_PART_TYPES = frozenset({"image", "image_url"})


@dataclass(frozen=True)
class Survey:
    """What format detection sees of a split, read from its Arrow schema (and, for
    conversations stored as JSON text, its first rows)."""

    label: str
    names: tuple[str, ...]  # every column
    present: tuple[str, ...]  # columns with at least one value
    texts: tuple[str, ...]  # columns of plain text
    message_keys: Mapping[str, frozenset[str]]  # columns of conversations -> their message keys
    image_parts: frozenset[str]  # conversation columns where some content part is an image
    # Text columns whose first rows are whole dialogues (Anthropic HH: "\n\nHuman: ...").
    dialogues: frozenset[str] = frozenset()
    # Columns where some row's text (a text column's, or a message's in a conversation) holds
    # an `<img>SOURCE</img>` tag (`parts.IMAGE_TAG`): images named inline, as Qwen-VL does.
    image_tags: frozenset[str] = frozenset()


def survey(ds: Any, label: str) -> Survey:
    names = tuple(ds.column_names)
    present = tuple(c for c in names if ds.data.column(c).null_count < ds.num_rows)
    keys: dict[str, frozenset[str]] = {}
    images: set[str] = set()
    texts: list[str] = []
    for column in present:
        found = _conversation_keys(ds, column)
        if found is not None:
            keys[column], part_types = found
            if part_types & IMAGE_PART_TYPES:
                images.add(column)
        elif _is_text(ds.features[column]):
            texts.append(column)
    dialogues = frozenset(c for c in texts if _holds_dialogues(ds, c))
    tags = frozenset(c for c in present if _holds_image_tags(ds, c))
    return Survey(label, names, present, tuple(texts), keys, frozenset(images), dialogues, tags)


def _holds_image_tags(ds: Any, column: str) -> bool:
    """Whether any row of `column` holds an `<img>` tag in its text, at any depth (a text
    column, JSON text, messages' contents, text parts): every row, by Arrow's regex (a tag
    may come late in a file whose first rows are text; a text stage must not learn it as
    words)."""
    import pyarrow.compute as pc

    return any(
        pc.any(pc.match_substring_regex(strings, IMAGE_TAG)).as_py()
        for chunk in ds.data.column(column).chunks
        for strings in _strings_in(chunk)
    )


def _strings_in(array: Any) -> list[Any]:
    """The arrays of strings inside `array`: itself, its lists' items, its structs' fields,
    an extension type's storage (`datasets.Json`), nested; none of other types."""
    import pyarrow as pa

    kind = array.type
    if isinstance(array, pa.ExtensionArray):
        return _strings_in(array.storage)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return [array]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _strings_in(array.flatten())
    if pa.types.is_struct(kind):
        return [found for child in array.flatten() for found in _strings_in(child)]
    return []


def _holds_dialogues(ds: Any, column: str) -> bool:
    first = ds.select(range(min(SURVEY_ROWS, ds.num_rows)))[column]
    return any(isinstance(text, str) and hh_messages(text) for text in first)


def _is_text(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in ("string", "large_string")


def _conversation_keys(ds: Any, column: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The message keys of a column of conversations and the types of the content parts in
    it; None when the column holds something else."""
    import datasets

    feature = ds.features[column]
    lists = (datasets.List, datasets.LargeList)
    message = feature.feature if isinstance(feature, lists) else feature
    if isinstance(message, dict) and not isinstance(message.get("content"), datasets.Json):
        if not (MESSAGE_KEYS <= message.keys() or SHAREGPT_KEYS <= message.keys()):
            return None
        content = message.get("content", message.get("value"))
        typed = _typed_part_types(ds, column) if isinstance(content, lists) else frozenset()
        return frozenset(message), typed if typed is not None else _read_part_types(ds, column)
    if not (
        _is_text(feature)
        or isinstance(feature, datasets.Json)
        or (isinstance(feature, lists) and isinstance(feature.feature, datasets.Json | dict))
    ):
        return None
    # Conversations as JSON text (CSV cells) or with mixed content types: look at rows.
    keys: set[str] = set()
    for messages in _first_messages(ds, column):
        keys.update(k for k, v in messages.items() if v is not None)
    return (frozenset(keys), _read_part_types(ds, column)) if keys else None


def _first_messages(
    ds: Any, column: str, rows: int | None = SURVEY_ROWS
) -> list[Mapping[str, Any]]:
    """The messages of the first `rows` rows (None: of every row)."""
    found = []
    shown = ds if rows is None else ds.select(range(min(rows, ds.num_rows)))
    for value in shown[column]:
        messages = json_messages(value)
        if isinstance(messages, Mapping):
            messages = [messages]  # one message a row
        found += (
            [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []
        )
    return found


def _read_part_types(ds: Any, column: str) -> frozenset[str]:
    """The `type`s of the content parts in every row's messages (an image part may come late
    in a file whose first rows are text)."""
    types = set()
    for message in _first_messages(ds, column, rows=None):
        content = json_messages(message.get("content", message.get("value")))
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and isinstance(part.get("type"), str):
                types.add(part["type"])
    return frozenset(types)


def _typed_part_types(ds: Any, column: str) -> frozenset[str] | None:
    """The `type`s of every content part in a column whose Arrow type spells them out (all
    rows, read by Arrow); None where the column is laid out otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def field(array: Any, name: str) -> Any:
        index = array.type.get_field_index(name)
        if index < 0:
            raise KeyError(name)
        return array.field(index)

    def listed(array: Any) -> bool:
        return pa.types.is_list(array.type) or pa.types.is_large_list(array.type)

    types: set[str] = set()
    try:
        for chunk in ds.data.column(column).chunks:
            messages = chunk.flatten() if listed(chunk) else chunk
            content = field(messages, "content")
            if not listed(content):
                return None
            kind = field(content.flatten(), "type")
            types.update(t for t in pc.unique(kind).to_pylist() if t is not None)
    except (AttributeError, KeyError, TypeError, ValueError, pa.ArrowException):
        return None
    return frozenset(types)
