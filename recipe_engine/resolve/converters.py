"""How rows become what TRL takes: the converters the format registry (`formats`) names. A
row shape's `make` turns one record into one TRL row; a format's `messages` reads a record's
conversation. Each reads the record through a `rows.RowConverter` (`row`), which checks every
value it hands out and names the row in errors. ``trl`` is imported only where ShareGPT rows
are converted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Row = Any  # a `rows.RowConverter` on one record (not imported: it imports the registry)
# What TRL reads, at the edge to it: a chat message ({role, content}), one part of a message's
# content ({"type": "text", "text": ...} or {"type": "image", ...}) and one row of a shape.
Message = dict[str, Any]
ContentPart = dict[str, Any]
TrlRow = dict[str, Any]

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
CHATML_EXAMPLE = '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]'
SHAREGPT_EXAMPLE = '[{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]'
FIREFLY_EXAMPLE = '[{"human": "...", "assistant": "..."}]'
FIREFLY_KEYS = frozenset({"human", "assistant"})


# --------------------------------------------------------------------------- row shapes


def messages_row(row: Row) -> TrlRow:
    return {"messages": row.conversation(parts=False)[0]}


def prompt_completion_row(row: Row) -> TrlRow:
    """Plain text: a `system` text, where rows have one, goes before the prompt."""
    return {"prompt": row.plain_prompt(row.text("prompt")), "completion": row.text("completion")}


def chat_prompt_completion_row(row: Row) -> TrlRow:
    """TRL's conversational prompt-completion: one user and one assistant turn (after the
    row's `system` message and its `history` turns, where it has them)."""
    prompt = [*alpaca_history(row), {"role": "user", "content": row.text("prompt")}]
    prompt, _ = row.validated(row.with_system(prompt), row.name("prompt"), False, last="user")
    return {
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": row.text("completion")}],
    }


def text_row(row: Row) -> TrlRow:
    """TRL's language modeling: the text as written (TRL adds the EOS token)."""
    return {"text": row.text("text")}


def vlm_row(row: Row) -> TrlRow:
    messages, all_strings = row.conversation(parts=True)
    images = row.row_images()
    placeholders = _placeholders(messages)
    if placeholders == 0 and images and all_strings:
        # Same rule as TRL's prepare_multimodal_messages: plain-text rows get their image
        # placeholders before the first user message's text.
        for message in messages:
            if message["role"] == "user":
                message["content"] = [_image_part() for _ in images] + message["content"]
                break
        placeholders = _placeholders(messages)
    row.check_placeholders(placeholders, len(images))
    return {"images": images, "messages": messages}


def vlm_prompt_completion_row(row: Row) -> TrlRow:
    """TRL's conversational prompt-completion with images: the prompt is one user turn (an
    image placeholder per image, then the text), the completion one assistant turn."""
    images = row.row_images()
    prompt = image_tokens_as_parts(row.text("prompt"))
    if isinstance(prompt, str):
        prompt = [_image_part() for _ in images] + [{"type": "text", "text": prompt}]
    row.check_placeholders(sum(p["type"] == "image" for p in prompt), len(images))
    completion = [{"type": "text", "text": row.text("completion")}]
    return {
        "images": images,
        "prompt": row.with_system([{"role": "user", "content": prompt}], parts=True),
        "completion": [{"role": "assistant", "content": completion}],
    }


def _image_part() -> ContentPart:
    return {"type": "image", "text": None}


def _placeholders(messages: list[Message]) -> int:
    return sum(1 for m in messages for p in m["content"] if p["type"] == "image")


# --------------------------------------------------------------------------- conversations


def chatml_messages(row: Row, parts: bool) -> tuple[list[Any], str]:
    messages = row.message_list("messages", "{role, content}", CHATML_EXAMPLE)
    return messages, row.name("messages")


def sharegpt_messages(row: Row, parts: bool) -> tuple[list[Any], str]:
    name = row.name("conversations")
    value = row.message_list("conversations", "{from, value}", SHAREGPT_EXAMPLE)
    return sharegpt_as_chatml(row, value, name), name


def sharegpt_as_chatml(row: Row, messages: list[Any], name: str) -> list[Message]:
    """ShareGPT messages in ChatML through TRL's own converter, then ShareGPT's role names
    (`human`, `gpt`), which TRL leaves as they are, as ChatML's."""
    from trl.data_utils import maybe_convert_to_chatml

    given = []
    for j, message in enumerate(messages, 1):
        keys = given_keys(message)
        if not ({"from", "value"} <= keys.keys() or {"role", "content"} <= keys.keys()):
            raise row.fail(
                f"message {j} of `{name}` is not a {{from, value}} object (ShareGPT)",
                'Write each message like {"from": "human", "value": "..."}.',
            )
        given.append(keys)
    chatml = maybe_convert_to_chatml({"conversations": given})["messages"]
    for j, message in enumerate(chatml, start=1):
        role = message["role"]
        if role not in SHAREGPT_ROLES:
            raise row.fail(
                f"message {j} of `{name}` is from `{role}`",
                f"ShareGPT roles are {', '.join(SHAREGPT_ROLES)}.",
            )
        message["role"] = SHAREGPT_ROLES[role]
    return chatml


def alpaca_messages(row: Row, parts: bool) -> tuple[list[Any], str]:
    """An instruction (with its optional input) as the user's turn, the output as the reply,
    after the turns of its optional `history` (LLaMA-Factory's `[[instruction, output], ...]`)."""
    messages = [*alpaca_history(row), {"role": "user", "content": alpaca_instruction(row)}]
    messages.append({"role": "assistant", "content": row.text("output")})
    return messages, "alpaca row"


def firefly_messages(row: Row, parts: bool) -> tuple[list[Any], str]:
    """Firefly's `conversation`: one {human, assistant} object per exchange, in order."""
    name = row.name("conversation")
    turns = row.message_list("conversation", "{human, assistant}", FIREFLY_EXAMPLE)
    messages: list[Message] = []
    for j, turn in enumerate(turns, 1):
        if not isinstance(turn, Mapping) or not FIREFLY_KEYS <= turn.keys():
            raise row.fail(
                f"exchange {j} of `{name}` is not a {{human, assistant}} object (Firefly)",
                f"Write each exchange like {FIREFLY_EXAMPLE[1:-1]}.",
            )
        messages += [
            {"role": "user", "content": turn["human"]},
            {"role": "assistant", "content": turn["assistant"]},
        ]
    return messages, name


def alpaca_instruction(row: Row) -> str:
    """The instruction and, where there is one, its input, as one user turn's text."""
    instruction, extra = row.text("instruction"), row.text("input", required=False)
    return f"{instruction}\n\n{extra}" if extra.strip() else instruction


def alpaca_history(row: Row) -> list[Message]:
    history = json_list(row.get("history", required=False)) or []
    if not isinstance(history, list) or not all(
        isinstance(turn, list) and len(turn) == 2 for turn in history
    ):
        raise row.fail(
            f"`{row.name('history')}` must be a list of [instruction, output] pairs",
            'Write it like [["earlier question", "earlier answer"]].',
        )
    turns = []
    for question, answer in history:
        turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return turns


# --------------------------------------------------------------------------- values


def json_list(value: Any) -> Any:
    """A list stored as JSON text (CSV cells) as a list; anything else as it is."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def json_messages(value: Any) -> Any:
    """Messages stored as JSON text (CSV cells): a list of them, or one message object,
    decoded; anything else as it is."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return json_list(value)


def given_keys(message: Any) -> Message:
    """A message's keys that hold a value (Arrow gives every row the keys of all rows)."""
    if not isinstance(message, Mapping):
        return {}
    return {k: v for k, v in message.items() if v is not None}


def image_tokens_as_parts(text: Any) -> Any:
    """LLaVA-style text with `<image>` marks as image and text parts; other text as it is."""
    if not isinstance(text, str) or IMAGE_TOKEN not in text:
        return text
    parts: list[ContentPart] = []
    for k, piece in enumerate(text.split(IMAGE_TOKEN)):
        if k:
            parts.append(_image_part())
        if piece.strip():
            parts.append({"type": "text", "text": piece.strip()})
    return parts
