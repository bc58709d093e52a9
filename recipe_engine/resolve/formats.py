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
from pathlib import Path
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


def has_images(output_format: str) -> bool:
    return output_format in (VLM, VLM_PROMPT_COMPLETION)


def is_prompt_completion(output_format: str) -> bool:
    return output_format in (PROMPT_COMPLETION, CHAT_PROMPT_COMPLETION, VLM_PROMPT_COMPLETION)


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
        messages = _json_list(value)
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping):
                keys.update(k for k, v in message.items() if v is not None)
                with_parts |= isinstance(message.get("content"), list)
    return (frozenset(keys), with_parts) if keys else None


def _json_list(value: Any) -> Any:
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

    fits = {  # format -> (whether the columns fit, the canonical names that state it)
        "conversation": (has("messages") or has("conversations"), ("messages", "conversations")),
        PROMPT_COMPLETION: (has("prompt") and has("completion"), ("prompt", "completion")),
        "alpaca": (has("instruction") and has("output"), ("instruction", "input", "output")),
    }
    # Explicitly mapped columns state the intended format first, so a misspelt mapping gets the
    # row-level "`x` (data.columns.y) is missing" error instead of another format's.
    for explicit in (True, False):
        for fmt, (fit, names) in fits.items():
            if fit and (not explicit or any(n in mapping for n in names)):
                return fmt
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


# --------------------------------------------------------------------------- rows


class RowConverter:
    """`Dataset.map(converter, with_indices=True)`: one raw record in, one TRL row out.

    Every error names the split and the row (`row_number(index)`: a JSON-lines file counts
    its lines, other files their records) and says how to fix it.
    """

    def __init__(
        self,
        layout: Layout,
        label: str,
        base_dir: Path | None,
        row_number: Callable[[int], int],
    ) -> None:
        self.layout = layout
        self.label = label
        self.base_dir = base_dir
        self.row_number = row_number
        self.index = 0
        self.record: Mapping[str, Any] = {}

    def __call__(self, record: Mapping[str, Any], index: int) -> dict[str, Any]:
        self.index, self.record = index, record  # read by fail()/get() for error messages
        output = self.layout.output
        if output == MESSAGES:
            return {"messages": self.conversation(parts=False)[0]}
        if output == PROMPT_COMPLETION:
            return {"prompt": self.text("prompt"), "completion": self.text("completion")}
        if output == CHAT_PROMPT_COMPLETION:  # TRL's conversational prompt-completion
            return {
                "prompt": [{"role": "user", "content": self.text("prompt")}],
                "completion": [{"role": "assistant", "content": self.text("completion")}],
            }
        if output == VLM:
            return self.vlm()
        return self.vlm_prompt_completion()

    # ----------------------------------------------------------------------- access

    def fail(self, problem: str, fix: str) -> RecipeError:
        return row_error(self.label, self.row_number(self.index), problem, fix)

    def name(self, canon: str) -> str:
        return self.layout.columns.get(canon, canon)

    def get(self, canon: str, required: bool = True) -> Any:
        name = self.name(canon)
        value = self.record.get(name)
        if value is None and required:
            mapped = f" (data.columns.{canon})" if name != canon else ""
            cols = ", ".join(k for k, v in self.record.items() if v is not None) or "none"
            raise self.fail(
                f"`{name}`{mapped} is missing (columns: {cols})", _COLUMNS_FIX.format(canon=canon)
            )
        return value

    def text(self, canon: str, required: bool = True) -> str:
        value = self.get(canon, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail(
                f"`{self.name(canon)}` must be a string, got {type(value).__name__}",
                "Quote the value in the data file.",
            )
        if required and not value.strip():
            raise self.fail(f"`{self.name(canon)}` is empty", "Fill it in or remove the row.")
        return value

    # ----------------------------------------------------------------------- conversations

    def conversation(self, parts: bool) -> tuple[list[dict[str, Any]], bool]:
        """Validated messages and whether every content was a plain string."""
        if self.layout.fmt == "alpaca":
            return self.validated(self.alpaca(), "alpaca row", parts)
        if self.layout.fmt == "sharegpt":
            return self.validated(self.sharegpt(parts), self.name("conversations"), parts)
        messages = self.message_list("messages", "{role, content}", CHATML_EXAMPLE)
        return self.validated(messages, self.name("messages"), parts)

    def alpaca(self) -> list[dict[str, Any]]:
        instruction, extra = self.text("instruction"), self.text("input", required=False)
        user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
        return [
            {"role": "user", "content": user},
            {"role": "assistant", "content": self.text("output")},
        ]

    def message_list(self, canon: str, shape: str, example: str) -> list[Any]:
        value = _json_list(self.get(canon))  # CSV cells hold the conversation as JSON
        if not isinstance(value, list) or not value:
            raise self.fail(
                f"`{self.name(canon)}` must be a non-empty list of {shape} objects, "
                f"got {type(value).__name__}",
                f"Write it like {example}.",
            )
        return value

    def sharegpt(self, parts: bool) -> list[dict[str, Any]]:
        """ShareGPT messages in ChatML through TRL's own converter, then ShareGPT's role
        names (`human`, `gpt`), which TRL leaves as they are, as ChatML's."""
        from trl.data_utils import maybe_convert_to_chatml

        name = self.name("conversations")
        messages = []
        for j, message in enumerate(
            self.message_list("conversations", "{from, value}", SHAREGPT_EXAMPLE), 1
        ):
            given = _given(message)
            if not ({"from", "value"} <= given.keys() or {"role", "content"} <= given.keys()):
                raise self.fail(
                    f"message {j} of `{name}` is not a {{from, value}} object (ShareGPT)",
                    'Write each message like {"from": "human", "value": "..."}.',
                )
            messages.append(given)
        chatml = maybe_convert_to_chatml({"conversations": messages})["messages"]
        for j, message in enumerate(chatml, start=1):
            role = message["role"]
            if role not in SHAREGPT_ROLES:
                raise self.fail(
                    f"message {j} of `{name}` is from `{role}`",
                    f"ShareGPT roles are {', '.join(SHAREGPT_ROLES)}.",
                )
            message["role"] = SHAREGPT_ROLES[role]
            if parts and message["role"] == "user":
                message["content"] = _image_tokens_as_parts(message["content"])
        return chatml

    def validated(
        self, value: list[Any], name: str, parts: bool
    ) -> tuple[list[dict[str, Any]], bool]:
        result, all_strings = [], True
        for j, msg in enumerate(value, start=1):
            if (
                not isinstance(msg, Mapping)
                or msg.get("role") is None
                or msg.get("content") is None
            ):
                raise self.fail(
                    f"message {j} of `{name}` is not a {{role, content}} object"
                    + _sharegpt_hint(msg),
                    "Give every message a `role` and a `content`.",
                )
            role = msg["role"]
            if role not in ROLES:
                hint = (
                    f" (`{role}` is a ShareGPT role name: data.format=sharegpt converts it)"
                    if role in SHAREGPT_ROLES
                    else ""
                )
                raise self.fail(
                    f"message {j} has role `{role}`{hint}",
                    f"Roles must be one of {', '.join(ROLES)}.",
                )
            content = msg["content"]
            if isinstance(content, str) or not parts:
                content = self.text_content(j, content)
                if parts:
                    content = [{"type": "text", "text": content}]
            else:
                all_strings = False
                content = self.parts(j, content)
            result.append({"role": role, "content": content})
        self.check_turns([m["role"] for m in result])
        return result, all_strings

    def check_turns(self, roles: list[str]) -> None:
        """An optional system message first, then user and assistant turns in alternation,
        ending with the assistant reply the model learns (what chat templates assume)."""
        for j, role in enumerate(roles, start=1):
            expected = _expected_role(roles[: j - 1])
            if role not in expected:
                raise self.fail(
                    f"message {j} is from `{role}` where {' or '.join(expected)} comes "
                    f"(roles: {', '.join(roles)})",
                    "Start with an optional system message, then alternate user and assistant "
                    "turns.",
                )
        if roles[-1] != "assistant":
            raise self.fail(
                f"the last message is from `{roles[-1]}`, not `assistant`",
                "End each conversation with the assistant reply the model should learn.",
            )

    def text_content(self, j: int, content: Any) -> str:
        if not isinstance(content, str):
            hint = (
                " (content lists with image/text parts need an images column and a VLM stage)"
                if isinstance(content, list)
                else ""
            )
            raise self.fail(
                f"message {j} content must be a string, got {type(content).__name__}{hint}",
                "Write the message text as a string.",
            )
        if not content.strip():
            raise self.fail(f"message {j} has empty content", "Fill it in or remove the row.")
        return content

    def parts(self, j: int, content: Any) -> list[dict[str, Any]]:
        if not isinstance(content, list) or not content:
            raise self.fail(
                f"message {j} content must be a string or a non-empty list of parts, "
                f"got {type(content).__name__}",
                'Use [{"type": "image"}, {"type": "text", "text": "..."}].',
            )
        out = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "image":
                out.append({"type": "image", "text": None})
            elif kind == "text":
                text = part.get("text")
                if not isinstance(text, str) or not text.strip():
                    raise self.fail(
                        f"message {j} has a text part with empty or non-string `text`",
                        'Give each text part a string: {"type": "text", "text": "..."}.',
                    )
                out.append({"type": "text", "text": text})
            else:
                raise self.fail(
                    f"message {j} has a content part that is not "
                    f'{{"type": "image"}} or {{"type": "text", ...}}: {part!r}',
                    "Use only image and text parts.",
                )
        return out

    # ----------------------------------------------------------------------- images

    def vlm(self) -> dict[str, Any]:
        images = self.images(self.get("images", required=False))
        messages, all_strings = self.conversation(parts=True)
        placeholders = _placeholders(messages)
        if placeholders == 0 and images and all_strings:
            # Same rule as TRL's prepare_multimodal_messages: plain-text rows get their image
            # placeholders before the first user message's text.
            for m in messages:
                if m["role"] == "user":
                    m["content"] = [{"type": "image", "text": None} for _ in images] + m["content"]
                    break
            placeholders = _placeholders(messages)
        self.check_placeholders(placeholders, len(images))
        return {"images": images, "messages": messages}

    def vlm_prompt_completion(self) -> dict[str, Any]:
        """TRL's conversational prompt-completion with images: the prompt is one user turn
        (an image placeholder per image, then the text), the completion one assistant turn."""
        images = self.images(self.get("images", required=False))
        prompt = _image_tokens_as_parts(self.text("prompt"))
        if isinstance(prompt, str):
            prompt = [{"type": "image", "text": None} for _ in images] + [
                {"type": "text", "text": prompt}
            ]
        self.check_placeholders(sum(p["type"] == "image" for p in prompt), len(images))
        completion = [{"type": "text", "text": self.text("completion")}]
        return {
            "images": images,
            "prompt": [{"role": "user", "content": prompt}],
            "completion": [{"role": "assistant", "content": completion}],
        }

    def check_placeholders(self, placeholders: int, images: int) -> None:
        if placeholders != images:
            raise self.fail(
                f'{placeholders} image placeholder(s) ({{"type": "image"}} or {IMAGE_TOKEN}) '
                f"but {images} image(s) in `{self.name('images')}`",
                "Give one entry in the images list per image placeholder.",
            )

    def images(self, value: Any) -> list[Any]:
        if value is None:
            return []  # text-only rows are fine in a VLM dataset
        value = _json_list(value)  # CSV cells hold lists as JSON
        if not isinstance(value, list):
            value = [value]
        return [self.image(k, item) for k, item in enumerate(value, start=1)]

    def image(self, k: int, item: Any) -> Any:
        from PIL import Image

        if isinstance(item, Image.Image):
            return item
        if isinstance(item, Mapping) and item.get("bytes"):
            return {"bytes": item["bytes"], "path": item.get("path")}
        if isinstance(item, Mapping) and item.get("path"):
            item = item["path"]
        if not isinstance(item, str) or not item:
            raise self.fail(
                f"image {k} in `{self.name('images')}` is {type(item).__name__}, not a file path",
                "List image paths (relative to the data file) as strings.",
            )
        path = Path(item).expanduser()
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        if not path.is_file():
            raise self.fail(
                f"image file {path} (image {k}) does not exist",
                "Image paths are relative to the data file's folder; fix the path or the row.",
            )
        try:
            with Image.open(path):  # parses the header only: cheap, catches non-images
                pass
        except Exception as exc:  # PIL raises many types for bad files
            raise self.fail(
                f"image file {path} (image {k}) is not a readable image ({exc})",
                "Replace the file with a PNG/JPEG image.",
            ) from exc
        # Keep the path, not pixels: `datasets` decodes lazily, so big VLM sets fit in memory.
        return {"path": str(path), "bytes": None}


def _placeholders(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages for p in m["content"] if p["type"] == "image")


def _image_tokens_as_parts(text: Any) -> Any:
    """LLaVA-style text with `<image>` marks as image and text parts; other text as it is."""
    if not isinstance(text, str) or IMAGE_TOKEN not in text:
        return text
    parts: list[dict[str, Any]] = []
    for k, piece in enumerate(text.split(IMAGE_TOKEN)):
        if k:
            parts.append({"type": "image", "text": None})
        if piece.strip():
            parts.append({"type": "text", "text": piece.strip()})
    return parts


def _given(message: Any) -> dict[str, Any]:
    """A message's keys that hold a value (Arrow gives every row the keys of all rows)."""
    if not isinstance(message, Mapping):
        return {}
    return {k: v for k, v in message.items() if v is not None}


def _sharegpt_hint(message: Any) -> str:
    if {"from", "value"} <= _given(message).keys():
        return " (it has `from`/`value` keys: that is ShareGPT; set data.format=sharegpt)"
    return ""


def _expected_role(before: list[str]) -> tuple[str, ...]:
    turns = [r for r in before if r != "system"]
    if not before:
        return ("system", "user")
    return ("user",) if not turns or turns[-1] == "assistant" else ("assistant",)


# --------------------------------------------------------------------------- features


def features(output_format: str) -> Any:
    """The Arrow features of rows in `output_format`."""
    import datasets as ds

    text = ds.Value("string")
    if output_format == MESSAGES:
        return ds.Features({"messages": ds.List({"role": text, "content": text})})
    if output_format == PROMPT_COMPLETION:
        return ds.Features({"prompt": text, "completion": text})
    if output_format == CHAT_PROMPT_COMPLETION:
        turn = ds.List({"role": text, "content": text})
        return ds.Features({"prompt": turn, "completion": turn})
    message = {"role": text, "content": ds.List({"type": text, "text": text})}
    images = ds.List(ds.Image(mode="RGB"))  # decoded to RGB PIL images on access
    if output_format == VLM:
        return ds.Features({"images": images, "messages": ds.List(message)})
    return ds.Features(
        {"images": images, "prompt": ds.List(message), "completion": ds.List(message)}
    )
