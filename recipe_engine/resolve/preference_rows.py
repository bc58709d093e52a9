"""Preference pairs (prompt / chosen / rejected) as TRL's preference trainers (DPO, ORPO) take
them: the `make` of the preference row shapes (`formats.SHAPES`).

Plain-text pairs stay text (`preference`) or go through the chat template as one user and one
assistant turn each (`chat_preference`, `data.chat_template`). Conversations always become
`chat_preference` (`vlm_preference` with images): the prompt's messages (an optional system
message, then alternating turns ending with the user's), each answer one assistant message. A
split without a `prompt` column gives `chosen` and `rejected` as full conversations; the turns
they share are the prompt (TRL's implicit prompt, read by `trl.data_utils.extract_prompt`).

Each reads the record through a `rows.RowConverter` (`row`): errors name the split, the row
and the fix. Whether a split's rows are text or conversations is decided once, from its survey
(`detection.Layout`); a row written the other way is refused. ``trl`` is imported only where an
implicit prompt is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from recipe_engine.resolve.converters import Row, given_keys, image_tokens_as_parts, json_messages

ANSWERS = ("chosen", "rejected")
PROMPT_EXAMPLE = '[{"role": "user", "content": "..."}]'
ANSWER_EXAMPLE = '"..." or {"role": "assistant", "content": "..."}'
_ONE_WAY = "Write every row's prompt, chosen and rejected one way: all as text, or all as messages."
_IMPLICIT = (
    "Map your prompt column with data.columns.prompt=<name>, or write `chosen` and `rejected` "
    "as full conversations that share the prompt turns (TRL's implicit prompt)."
)


class Pair(NamedTuple):
    """A preference pair as messages, and whether every content was a plain string."""

    prompt: list[dict[str, Any]]
    chosen: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    all_strings: bool


# --------------------------------------------------------------------------- row shapes


def preference_row(row: Row) -> dict[str, Any]:
    """TRL's standard preference: the prompt and both answers as text."""
    if row.layout.implicit_prompt:
        raise _no_prompt(row)
    prompt, chosen, rejected = (_plain(row, canon) for canon in ("prompt", *ANSWERS))
    _check_differ(row, chosen, rejected)
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def chat_preference_row(row: Row) -> dict[str, Any]:
    """TRL's conversational preference: the prompt's messages, each answer one assistant turn."""
    pair = _conversation_pair(row, parts=False)
    return {"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected}


def vlm_preference_row(row: Row) -> dict[str, Any]:
    """TRL's vision preference rows: the images, the prompt's messages of image/text parts
    (plain-text prompts get one image placeholder per image before the first user text, as
    TRL's prepare_multimodal_messages does), each answer one assistant turn of text parts."""
    images = row.images(row.get("images", required=False))
    pair = _conversation_pair(row, parts=True)
    placeholders = _placeholders(pair.prompt)
    if placeholders == 0 and images and pair.all_strings:
        user = next(message for message in pair.prompt if message["role"] == "user")
        user["content"] = [_image_part() for _ in images] + user["content"]
        placeholders = len(images)
    for canon, answer in zip(ANSWERS, (pair.chosen, pair.rejected), strict=True):
        if _placeholders(answer):
            raise row.fail(
                f"`{row.name(canon)}` holds an image part",
                "Images belong to the prompt: write the answers as text.",
            )
    row.check_placeholders(placeholders, len(images))
    return {
        "images": images,
        "prompt": pair.prompt,
        "chosen": pair.chosen,
        "rejected": pair.rejected,
    }


# --------------------------------------------------------------------------- text


def _plain(row: Row, canon: str) -> str:
    value = _scalar_text(row.get(canon))
    if _message_like(value) or _decoded(value) is not value:
        raise row.fail(
            f"`{row.name(canon)}` holds messages, but this split's first rows hold text there",
            _ONE_WAY,
        )
    return row.checked_text(canon, value)


def _no_prompt(row: Row) -> Exception:
    columns = ", ".join(k for k, v in row.record.items() if v is not None) or "none"
    return row.fail(f"`{row.name('prompt')}` is missing (columns: {columns})", _IMPLICIT)


def _check_differ(row: Row, chosen: str, rejected: str) -> None:
    if chosen.strip() == rejected.strip():
        raise row.fail(
            f"`{row.name('chosen')}` and `{row.name('rejected')}` are the same answer: "
            "nothing to prefer",
            "Give a rejected answer that differs from the chosen one, or remove the row.",
        )


# --------------------------------------------------------------------------- conversations


def _conversation_pair(row: Row, parts: bool) -> Pair:
    if row.layout.implicit_prompt:
        pair = _implicit_pair(row, parts)
    else:
        prompt, all_strings = _prompt(row, parts)
        chosen, rejected = (_answer(row, canon, parts) for canon in ANSWERS)
        pair = Pair(prompt, chosen, rejected, all_strings)
    _check_differ(row, _text(pair.chosen), _text(pair.rejected))
    return pair


def _prompt(row: Row, parts: bool) -> tuple[list[dict[str, Any]], bool]:
    """The prompt's messages: text as one user turn, or messages ending with a user turn."""
    name = row.name("prompt")
    value = _decoded(_scalar_text(row.get("prompt")))
    if isinstance(value, str):
        text = row.checked_text("prompt", value)
        content = image_tokens_as_parts(text) if parts else text
        all_strings = isinstance(content, str)
        if parts and all_strings:
            content = [{"type": "text", "text": content}]
        return [{"role": "user", "content": content}], all_strings
    if isinstance(value, Mapping):
        value = [value]  # one message
    if not isinstance(value, list) or not value:
        raise row.fail(
            f"`{name}` must be text or a non-empty list of messages ending with a user turn, "
            f"got {type(value).__name__}",
            f"Write it like {PROMPT_EXAMPLE}.",
        )
    return row.validated(value, name, parts, last="user")


def _answer(row: Row, canon: str, parts: bool) -> list[dict[str, Any]]:
    """One answer as one assistant message: from text, one message, or a list of one."""
    name = row.name(canon)
    value = _decoded(_scalar_text(row.get(canon)))
    if isinstance(value, list):
        if len(value) > 1:
            raise row.fail(
                f"`{name}` holds {len(value)} messages, not one answer",
                "Give the answer as text or as one assistant message; the turns before it "
                "belong in the prompt (data.columns.prompt).",
            )
        value = value[0] if value else ""
    if isinstance(value, Mapping):
        message = given_keys(value)
        if message.get("role") != "assistant":
            raise row.fail(
                f"`{name}` is a message from `{message.get('role')}`, not `assistant`",
                "Give the answer as text or as one message with role assistant.",
            )
        value = _scalar_text(message.get("content", ""))
    if isinstance(value, str):
        if not value.strip():
            raise row.fail(f"`{name}` is empty", "Fill it in or remove the row.")
        content: Any = [{"type": "text", "text": value}] if parts else value
    elif parts and isinstance(value, list):
        content = row.parts(1, value)
    else:
        raise row.fail(
            f"`{name}` must be text or one assistant message, got {type(value).__name__}"
            + (
                " (image/text parts need an images column and a VLM stage)"
                if isinstance(value, list)
                else ""
            ),
            f"Write it like {ANSWER_EXAMPLE}.",
        )
    return [{"role": "assistant", "content": content}]


def _implicit_pair(row: Row, parts: bool) -> Pair:
    """No `prompt` column: `chosen` and `rejected` are full conversations, and the turns they
    share are the prompt; what follows must be one assistant turn in each."""
    from trl.data_utils import extract_prompt

    conversations, all_strings = {}, True
    for canon in ANSWERS:
        name, value = row.name(canon), _decoded(row.get(canon))
        if not isinstance(value, list) or not value:
            what = "text" if isinstance(value, str) else type(value).__name__
            raise row.fail(
                f"there is no `{row.name('prompt')}` column, and `{name}` is {what}, "
                "not a conversation",
                _IMPLICIT,
            )
        conversations[canon], strings = row.validated(value, name, parts)
        all_strings = all_strings and strings
    split = extract_prompt(conversations)
    chosen, rejected = (row.name(canon) for canon in ANSWERS)
    if not split["prompt"]:
        raise row.fail(
            f"`{chosen}` and `{rejected}` share no turns: there is no prompt to read from them",
            "Start both with the same prompt turns (TRL's implicit prompt), or add a prompt "
            "column (data.columns.prompt=<name>).",
        )
    if len(split["chosen"]) != 1 or len(split["rejected"]) != 1:
        raise row.fail(
            f"`{chosen}` and `{rejected}` differ before their final assistant turn (they "
            f"share {len(split['prompt'])} message(s))",
            "Give both the same turns up to the final assistant answer, which alone differs.",
        )
    return Pair(split["prompt"], split["chosen"], split["rejected"], all_strings)


# --------------------------------------------------------------------------- values


def _decoded(value: Any) -> Any:
    """Messages stored as JSON text (CSV cells) decoded; anything else, other JSON text
    included, as it is."""
    decoded = json_messages(value)
    return decoded if decoded is not value and _message_like(decoded) else value


def _scalar_text(value: Any) -> Any:
    """A number (or true/false) as its JSON text: a column whose rows mix text and messages is
    read as JSON (`datasets.Json`), which gives text that parses as JSON ("4") as the value."""
    return json.dumps(value) if isinstance(value, int | float) else value


def _message_like(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "role" in value
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, Mapping) and "role" in m for m in value)
    )


def _text(messages: list[dict[str, Any]]) -> str:
    """The text of messages: string contents and text parts."""
    pieces = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            pieces.append(content)
        else:
            pieces += [part["text"] for part in content if part["type"] == "text"]
    return "\n".join(pieces)


def _image_part() -> dict[str, Any]:
    return {"type": "image", "text": None}


def _placeholders(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for message in messages
        if not isinstance(message["content"], str)
        for part in message["content"]
        if part["type"] == "image"
    )
