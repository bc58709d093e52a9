"""Row formats: what a split's columns hold, and every row converted to a shape TRL's
SFTTrainer takes, with errors that name the split, the row and the fix.

Input formats (`data.format`; `auto` detects one from the columns):

- ``messages``: a list of ``{role, content}`` messages (content text, or image/text parts)
- ``sharegpt``: a list of ``{from, value}`` messages (``conversations``), converted with TRL's
  ``maybe_convert_to_chatml``; ShareGPT's ``human`` / ``gpt`` roles become ``user`` / ``assistant``
- ``prompt_completion``: a ``prompt`` and a ``completion`` text
- ``alpaca``: ``instruction``, optional ``input``, ``output``
- ``vlm``: ``messages`` with images (kept for configs that name it)

Any of them takes an ``images`` column (paths relative to the data file, or image bytes) on a
vision-language stage. Output shapes (`OUTPUT_FORMATS`, what `DataSplits.format` reports):

- ``messages``: ``{"messages": [{"role", "content": str}]}`` (Alpaca and ShareGPT end up here)
- ``prompt_completion``: ``{"prompt": str, "completion": str}``
- ``chat_prompt_completion``: ``{"prompt": [user message], "completion": [assistant message]}``,
  plain-text prompt/completion rows as TRL's conversational prompt-completion, so TRL trains
  them through the chat template (the planner chooses it: `data.chat_template`)
- ``vlm``: ``{"images": [image], "messages": [{"role", "content": [part]}]}``
- ``vlm_prompt_completion``: ``{"images": [image], "prompt": [user message of parts],
  "completion": [assistant message of parts]}``: TRL's conversational prompt-completion with
  images (its vision collator fills the image parts and masks the prompt)

A part is ``{"type": "image", "text": None}`` or ``{"type": "text", "text": str}``.
``datasets``, ``PIL`` and ``trl`` are imported only where rows are read or converted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.errors import RecipeError

INPUT_FORMATS = ("messages", "prompt_completion", "alpaca", "sharegpt", "vlm")
MESSAGES, PROMPT_COMPLETION = "messages", "prompt_completion"
CHAT_PROMPT_COMPLETION = "chat_prompt_completion"
VLM, VLM_PROMPT_COMPLETION = "vlm", "vlm_prompt_completion"
OUTPUT_FORMATS = (MESSAGES, PROMPT_COMPLETION, CHAT_PROMPT_COMPLETION, VLM, VLM_PROMPT_COMPLETION)
CANONICAL_COLUMNS = (
    "messages",
    "conversations",
    "prompt",
    "completion",
    "instruction",
    "input",
    "output",
    "images",
)
ROLES = ("system", "user", "assistant")
# ShareGPT's role names (the `from` values of its messages) and ChatML's own.
SHAREGPT_ROLES = {
    "human": "user",
    "gpt": "assistant",
    "system": "system",
    "user": "user",
    "assistant": "assistant",
}
# LLaVA-style ShareGPT marks where an image goes inside the text.
IMAGE_TOKEN = "<image>"
# Rows read to learn the keys of conversations stored as JSON text (CSV cells, mixed types).
SURVEY_ROWS = 64
# Column names that usually hold what a canonical column holds (for the hints in errors).
LOOKS_LIKE = {
    "images": re.compile(r"im(a)?g|picture|photo", re.IGNORECASE),
    "prompt": re.compile(r"^(q|question|query|prompt|input|instruction|user|text)$", re.IGNORECASE),
    "completion": re.compile(
        r"^(a|answer|response|output|completion|target|label|reply)$", re.IGNORECASE
    ),
}

_COLUMNS_FIX = "Map your column with data.columns.{canon}=<name> or fix the row."
CHATML_EXAMPLE = '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]'
SHAREGPT_EXAMPLE = '[{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]'


@dataclass(frozen=True)
class InputFormat:
    """A format users write rows in (`data.format`): the canonical columns that state it, and
    the columns a split needs to be read as it (each group: one of its columns)."""

    name: str
    columns: tuple[str, ...]
    needs: tuple[tuple[str, ...], ...]
    # Its rows as role/content messages, read through a `rows.RowConverter` (`text`, `get`);
    # None: conversations already (read by the converter) or a prompt and a completion.
    messages: Callable[[Any], list[dict[str, Any]]] | None = None


@dataclass(frozen=True)
class RowShape:
    """A shape of rows TRL's SFTTrainer takes (`DataSplits.format`) and what follows from it:
    whether it carries images (a vision-language stage only), whether the loss can go on the
    completion alone (`completion_only_loss`) or on the assistant's turns
    (`assistant_only_loss`), how a row is made (`RowConverter.<make>`) and its Arrow features."""

    name: str
    images: bool
    prompt_completion: bool
    make: str
    features: Callable[[Any], Any]  # the `datasets` module -> the features of such rows

    @property
    def loss_flag(self) -> str:
        return "completion_only_loss" if self.prompt_completion else "assistant_only_loss"


# Detection tries them in this order; a conversation is ShareGPT or role/content messages by
# its message keys. A new input format is one entry here and a `RowConverter` method.
def _alpaca_messages(row: Any) -> list[dict[str, Any]]:
    """An instruction (with its optional input) as the user's turn, the output as the reply."""
    instruction, extra = row.text("instruction"), row.text("input", required=False)
    user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": row.text("output")},
    ]


INPUTS = (
    InputFormat("conversation", ("messages", "conversations"), (("messages", "conversations"),)),
    InputFormat(PROMPT_COMPLETION, ("prompt", "completion"), (("prompt",), ("completion",))),
    InputFormat(
        "alpaca",
        ("instruction", "input", "output"),
        (("instruction",), ("output",)),
        messages=_alpaca_messages,
    ),
)
INPUT_BY_NAME = {given.name: given for given in INPUTS}


def _text_features(ds: Any) -> Any:
    return ds.Features({"prompt": ds.Value("string"), "completion": ds.Value("string")})


def _message_features(ds: Any) -> Any:
    return ds.List({"role": ds.Value("string"), "content": ds.Value("string")})


def _part_features(ds: Any) -> Any:
    text = ds.Value("string")
    return ds.List({"role": text, "content": ds.List({"type": text, "text": text})})


def _images(ds: Any) -> Any:
    return ds.List(ds.Image(mode="RGB"))  # decoded to RGB PIL images on access


SHAPES: dict[str, RowShape] = {
    shape.name: shape
    for shape in (
        RowShape(
            MESSAGES,
            images=False,
            prompt_completion=False,
            make="messages",
            features=lambda ds: ds.Features({"messages": _message_features(ds)}),
        ),
        RowShape(PROMPT_COMPLETION, False, True, "prompt_completion", _text_features),
        RowShape(
            CHAT_PROMPT_COMPLETION,
            images=False,
            prompt_completion=True,
            make="chat_prompt_completion",
            features=lambda ds: ds.Features(
                {"prompt": _message_features(ds), "completion": _message_features(ds)}
            ),
        ),
        RowShape(
            VLM,
            images=True,
            prompt_completion=False,
            make="vlm",
            features=lambda ds: ds.Features(
                {"images": _images(ds), "messages": _part_features(ds)}
            ),
        ),
        RowShape(
            VLM_PROMPT_COMPLETION,
            images=True,
            prompt_completion=True,
            make="vlm_prompt_completion",
            features=lambda ds: ds.Features(
                {
                    "images": _images(ds),
                    "prompt": _part_features(ds),
                    "completion": _part_features(ds),
                }
            ),
        ),
    )
}


def has_images(output_format: str) -> bool:
    return SHAPES[output_format].images


def is_prompt_completion(output_format: str) -> bool:
    return SHAPES[output_format].prompt_completion


def is_text_prompt_completion(output_format: str) -> bool:
    """Plain prompt/completion text: rows a chat template may wrap (`data.chat_template`)."""
    shape = SHAPES[output_format]
    return shape.prompt_completion and not shape.images


def features(output_format: str) -> Any:
    """The Arrow features of rows in `output_format`."""
    import datasets

    return SHAPES[output_format].features(datasets)


def row_error(label: str, row: int, problem: str, fix: str) -> RecipeError:
    return RecipeError(f"{label}, row {row}: {problem}. {fix}", key="data.path")


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
        messages = json_list(value)
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping):
                keys.update(k for k, v in message.items() if v is not None)
                with_parts |= isinstance(message.get("content"), list)
    return (frozenset(keys), with_parts) if keys else None


def json_list(value: Any) -> Any:
    """A list stored as JSON text (CSV cells) as a list; anything else as it is."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def looks_sharegpt(keys: frozenset[str] | None) -> bool:
    return bool(keys) and {"from", "value"} <= keys and not {"role", "content"} <= keys


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """How a split's rows are read: the input format, the column behind every canonical name,
    and whether rows carry images."""

    fmt: str  # messages | sharegpt | prompt_completion | alpaca
    columns: Mapping[str, str]  # canonical name -> the split's column
    images: bool
    chat: bool = False  # plain prompt/completion text as one user and one assistant turn

    @property
    def output(self) -> str:
        if self.fmt == PROMPT_COMPLETION and self.images:
            return VLM_PROMPT_COMPLETION
        if self.fmt == PROMPT_COMPLETION:
            return CHAT_PROMPT_COMPLETION if self.chat else PROMPT_COMPLETION
        return VLM if self.images else MESSAGES

    def describe(self) -> str:
        return f"{self.fmt}{' with images' if self.images else ''}"


def resolve_layout(setting: str, seen: Survey, mapping: Mapping[str, str]) -> Layout:
    """The layout for `data.format` = `setting` (auto: detected) and `data.columns`."""
    columns = {canon: mapping.get(canon, canon) for canon in CANONICAL_COLUMNS}
    _check_mapped_images(seen, mapping)
    fmt = _detect(seen, mapping) if setting == "auto" else setting
    if fmt in ("conversation", MESSAGES, "sharegpt", VLM):
        conversation = _conversation_column(seen, mapping)
        keys = seen.message_keys.get(conversation)
        if fmt == "conversation":
            fmt = "sharegpt" if looks_sharegpt(keys) else MESSAGES
        # Both formats read one column: the mapped one, `messages` or `conversations`.
        columns["messages"] = columns["conversations"] = conversation
    images = (
        setting == VLM
        or columns["images"] in seen.present
        or columns["messages"] in seen.with_parts
    )
    return Layout(MESSAGES if fmt == VLM else fmt, columns, images)


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


def _detect(seen: Survey, mapping: Mapping[str, str]) -> str:
    def has(canon: str) -> bool:
        return canon in mapping or canon in seen.present

    def fits(given: InputFormat) -> bool:
        return all(any(has(c) for c in group) for group in given.needs)

    # Explicitly mapped columns state the intended format first, so a misspelt mapping gets the
    # row-level "`x` (data.columns.y) is missing" error instead of another format's.
    for explicit in (True, False):
        for given in INPUTS:
            if fits(given) and (not explicit or any(n in mapping for n in given.columns)):
                return given.name
    raise _undetectable(seen)


def _undetectable(seen: Survey) -> RecipeError:
    hints = _hints(seen)
    detected = f" Seen: {'; '.join(hints)}." if hints else ""
    return RecipeError(
        f"{seen.label}: cannot tell the data format from its columns "
        f"({', '.join(seen.present) or 'none'}).{detected} Expected `messages` (role/content "
        "messages), `conversations` (ShareGPT from/value messages), `prompt`+`completion`, or "
        "`instruction`+`output` (Alpaca); an `images` column adds images. Map your columns "
        "with data.columns.<name>=<your column> (names: "
        f"{', '.join(CANONICAL_COLUMNS)}) and, if needed, set "
        f"data.format=<{'|'.join(INPUT_FORMATS)}>.",
        key="data.format",
    )


def _hints(seen: Survey) -> list[str]:
    """What each column looks like, with the mapping that would use it."""
    hints = []
    for column, keys in seen.message_keys.items():
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
    texts = [c for c in seen.texts if not LOOKS_LIKE["images"].search(c)]
    prompt = next((c for c in texts if LOOKS_LIKE["prompt"].match(c)), texts[0] if texts else None)
    rest = [c for c in texts if c != prompt]
    answer = next((c for c in rest if LOOKS_LIKE["completion"].match(c)), rest[0] if rest else None)
    if prompt and answer:
        hints.append(
            f"text columns `{prompt}`, `{answer}`: for prompt/completion rows "
            f"data.columns.prompt={prompt} data.columns.completion={answer}"
        )
    return hints
