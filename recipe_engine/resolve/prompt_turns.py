"""A judged row's prompt and answers as messages, wherever its format keeps them: the rows of
preference pairs (DPO, ORPO: `preference_rows`) and of unpaired feedback (KTO: `unpaired_rows`).

Where the prompt comes from (`Layout.prompt_from`, decided once per split by `detection`):

- ``prompt``: a prompt column: text, one message, or messages ending with the user's turn
  (TRL; Axolotl's ``chatml.intel`` / ``prompt_pairs`` with ``question`` or ``prompt``)
- ``instruction``: Alpaca's ``instruction`` and optional ``input`` (LLaMA-Factory's alpaca
  preference and KTO files; Axolotl's ``chatml.argilla``)
- ``conversation``: a conversation column (``conversations`` of ShareGPT ``from``/``value``
  turns, or ``messages`` of ``role``/``content`` turns). It ends with the user's turn when the
  answers have columns of their own (LLaMA-Factory's ShareGPT pairs, Axolotl's
  ``chat_template.default``), or with the answer itself (`Layout.answer_in_conversation`:
  ms-swift's ``messages`` + ``rejected_response``, LLaMA-Factory's and ms-swift's KTO files)
- ``implicit``: no prompt column; the answers are whole conversations sharing the prompt turns
  (TRL's implicit prompt, read by `trl.data_utils.extract_prompt`; LLaMA-Factory's
  ``chosen_messages`` / ``rejected_messages``), or Anthropic HH texts
  (``\\n\\nHuman: ...\\n\\nAssistant: ...``)

Any of them may have a ``system`` column: the prompt's first message. Each function reads the
record through a `rows.RowConverter` (`row`): errors name the split, the row and the fix.
``trl`` is imported only where an implicit prompt is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.converters import (
    Message,
    Row,
    alpaca_instruction,
    given_keys,
    json_messages,
    sharegpt_as_chatml,
)

PROMPT, INSTRUCTION, CONVERSATION, IMPLICIT = "prompt", "instruction", "conversation", "implicit"
PROMPT_SOURCES = (PROMPT, INSTRUCTION, CONVERSATION, IMPLICIT)
PROMPT_EXAMPLE = '[{"role": "user", "content": "..."}]'
ANSWER_EXAMPLE = '"..." or {"role": "assistant", "content": "..."}'
IMPLICIT_FIX = (
    "Map your prompt column with data.columns.prompt=<name>, or write the answers as full "
    "conversations that share the prompt turns (TRL's implicit prompt)."
)
# Anthropic HH's turns: "\n\nHuman: ..." and "\n\nAssistant: ...".
_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


class Turns(NamedTuple):
    """A prompt (messages ending with the user's turn) and whether every content was a plain
    string (so images, if any, get their placeholders before the first user text)."""

    messages: list[Message]
    all_strings: bool


# --------------------------------------------------------------------------- the prompt


def prompt_turns(row: Row, parts: bool) -> Turns:
    """The prompt's messages, from the source the split's layout names (not `implicit`: those
    rows give their prompt with their answers, `implicit_turns`)."""
    source = row.layout.prompt_from
    if source == INSTRUCTION:
        return _validated(row, [_user(alpaca_instruction(row))], "instruction", parts)
    if source == CONVERSATION:
        name = row.name("messages")
        return _validated(row, conversation_messages(row, "messages"), name, parts)
    name, value = row.name("prompt"), decoded(scalar_text(row.get("prompt")))
    if isinstance(value, str):
        return _validated(row, [_user(row.checked_text("prompt", value))], name, parts)
    if isinstance(value, Mapping):
        value = [value]  # one message
    if not isinstance(value, list) or not value:
        raise row.fail(
            f"`{name}` must be text or a non-empty list of messages ending with a user turn, "
            f"got {type(value).__name__}",
            f"Write it like {PROMPT_EXAMPLE}.",
        )
    return _validated(row, [as_chatml(row, m, name) for m in value], name, parts)


def plain_prompt(row: Row) -> str:
    """The prompt as plain text (rows read as text: a prompt column's or an instruction's
    text), after the row's system text."""
    if row.layout.prompt_from == INSTRUCTION:
        return row.plain_prompt(alpaca_instruction(row))
    value = scalar_text(row.get("prompt"))
    if message_like(value) or decoded(value) is not value:
        raise row.fail(
            f"`{row.name('prompt')}` holds messages, but this split's first rows hold text there",
            "Write every row's prompt and answers one way: all as text, or all as messages.",
        )
    return row.plain_prompt(row.checked_text("prompt", value))


def _validated(row: Row, messages: list[Any], name: str, parts: bool) -> Turns:
    return Turns(*row.validated(row.with_system(messages), name, parts, last="user"))


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


# --------------------------------------------------------------------------- conversations


def conversation_messages(row: Row, canon: str) -> list[Message]:
    """A column of messages (ShareGPT `from`/`value` or `role`/`content` turns) as ChatML
    messages, not yet validated."""
    name = row.name(canon)
    value = decoded(row.get(canon))
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list) or not value:
        raise row.fail(
            f"`{name}` must be a non-empty list of messages, got {type(value).__name__}",
            f"Write it like {PROMPT_EXAMPLE}.",
        )
    return [as_chatml(row, message, name) for message in value]


def as_chatml(row: Row, message: Any, name: str) -> Any:
    """A ShareGPT message (`from`/`value`, roles `human` / `gpt`) as a role/content one; any
    other value as it is (validation says what is wrong with it)."""
    keys = given_keys(message)
    if {"from", "value"} <= keys.keys() and "role" not in keys:
        return sharegpt_as_chatml(row, [keys], name)[0]
    return message


def answered_conversation(row: Row, canon: str, parts: bool) -> Turns:
    """A conversation that ends with the answer (the assistant's last turn), validated."""
    messages = row.with_system(conversation_messages(row, canon))
    return Turns(*row.validated(messages, row.name(canon), parts))


def answer(row: Row, canon: str, parts: bool, after: Turns | None = None) -> list[Message]:
    """One answer as one assistant message: from text, one message, or a list of one; or the
    last turn of a whole conversation whose turns before it are the prompt `after`
    (Axolotl's `chatml.ultra`)."""
    name = row.name(canon)
    value = decoded(scalar_text(row.get(canon)))
    if isinstance(value, list):
        if len(value) > 1:
            return _last_turn(row, canon, parts, after)
        value = value[0] if value else ""
    if isinstance(value, Mapping):
        message = as_chatml(row, given_keys(value), name)
        if message.get("role") != "assistant":
            raise row.fail(
                f"`{name}` is a message from `{message.get('role')}`, not `assistant`",
                "Give the answer as text or as one message with role assistant.",
            )
        value = scalar_text(message.get("content", ""))
    if isinstance(value, str):
        if not value.strip():
            raise row.fail(f"`{name}` is empty", "Fill it in or remove the row.")
        return assistant_turn(value, parts)
    if isinstance(value, list) and value:
        content = row.parts(1, value) if parts else row.text_of_parts(1, value)
        return [{"role": "assistant", "content": content}]
    raise row.fail(
        f"`{name}` must be text or one assistant message, got {type(value).__name__}",
        f"Write it like {ANSWER_EXAMPLE}.",
    )


def assistant_turn(text: str, parts: bool) -> list[Message]:
    """An answer's text as one assistant message (its content one text part, `parts`)."""
    return [{"role": "assistant", "content": [{"type": "text", "text": text}] if parts else text}]


def _last_turn(row: Row, canon: str, parts: bool, prompt: Turns | None) -> list[Message]:
    name = row.name(canon)
    messages = conversation_messages(row, canon)
    if prompt is not None:
        try:
            turns, _ = row.validated(messages, name, parts)
        except RecipeError:  # not a conversation ending with an answer: said below
            turns = []
        if turns and _said(turns[:-1]) == _said(prompt.messages):
            return turns[-1:]
    raise row.fail(
        f"`{name}` holds {len(messages)} messages, not one answer"
        + (" (the turns before its last are not the prompt's)" if prompt is not None else ""),
        "Give the answer as text or as one assistant message; the turns before it belong in "
        "the prompt (data.columns.prompt).",
    )


def _said(messages: list[Message]) -> list[tuple[str, str]]:
    """The turns of a conversation as (role, text), system messages aside."""
    return [(m["role"], text_of([m])) for m in messages if m["role"] != "system"]


# --------------------------------------------------------------------------- implicit prompt


def implicit_turns(row: Row, canons: tuple[str, ...], parts: bool) -> tuple[Turns, list[Any]]:
    """No prompt column: the columns `canons` hold whole conversations (or Anthropic HH
    texts) sharing the prompt turns; what follows must be one assistant turn in each. The
    prompt, and each column's answer."""
    from trl.data_utils import extract_prompt

    conversations, all_strings = {}, True
    for canon in canons:
        messages, strings = row.validated(
            row.with_system(_whole_conversation(row, canon)), row.name(canon), parts
        )
        conversations[canon] = messages
        all_strings = all_strings and strings
    if len(canons) == 1:  # one answer: the prompt is every turn before it
        [messages] = conversations.values()
        split = {"prompt": messages[:-1], canons[0]: messages[-1:]}
    else:
        split = extract_prompt(conversations)
    named = " and ".join(f"`{row.name(canon)}`" for canon in canons)
    if not split["prompt"]:
        raise row.fail(
            f"{named} share no turns: there is no prompt to read from them",
            "Start them with the same prompt turns (TRL's implicit prompt), or add a prompt "
            "column (data.columns.prompt=<name>).",
        )
    if any(len(split[canon]) != 1 for canon in canons):
        raise row.fail(
            f"{named} differ before their final assistant turn (they share "
            f"{len(split['prompt'])} message(s))",
            "Give both the same turns up to the final assistant answer, which alone differs.",
        )
    return Turns(split["prompt"], all_strings), [split[canon] for canon in canons]


def _whole_conversation(row: Row, canon: str) -> list[Any]:
    value = decoded(row.get(canon))
    if isinstance(value, str):
        turns = hh_messages(value)
        if turns is not None:
            return turns
    if not isinstance(value, list) or not value:
        what = "text" if isinstance(value, str) else type(value).__name__
        raise row.fail(
            f"there is no `{row.name('prompt')}` column, and `{row.name(canon)}` is {what}, "
            "not a conversation (nor an Anthropic HH text of \\n\\nHuman: / \\n\\nAssistant: "
            "turns)",
            IMPLICIT_FIX,
        )
    return [as_chatml(row, message, row.name(canon)) for message in value]


def hh_messages(text: str) -> list[Message] | None:
    """An Anthropic HH text (`\\n\\nHuman: ...\\n\\nAssistant: ...`) as messages; None when the
    text has no such turns."""
    marks = list(_HH_TURN.finditer(text))
    if not marks or marks[0].start() != 0 and text[: marks[0].start()].strip():
        return None
    ends = [mark.start() for mark in marks[1:]] + [len(text)]
    return [
        {"role": _HH_ROLES[mark.group(1)], "content": text[mark.end() : end].strip()}
        for mark, end in zip(marks, ends, strict=True)
    ]


# --------------------------------------------------------------------------- values


def decoded(value: Any) -> Any:
    """Messages stored as JSON text (CSV cells) decoded; anything else, other JSON text
    included, as it is."""
    found = json_messages(value)
    return found if found is not value and message_like(found) else value


def scalar_text(value: Any) -> Any:
    """A number (or true/false) as its JSON text: a column whose rows mix text and messages is
    read as JSON (`datasets.Json`), which gives text that parses as JSON ("4") as the value."""
    return json.dumps(value) if isinstance(value, int | float) else value


def message_like(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "role" in value or "from" in value
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, Mapping) and ("role" in m or "from" in m) for m in value)
    )


def text_of(messages: list[Message]) -> str:
    """The text of messages: string contents and text parts."""
    pieces = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            pieces.append(content)
        else:
            pieces += [part["text"] for part in content if part["type"] == "text"]
    return "\n".join(pieces)


def image_placeholders(messages: list[Message]) -> int:
    return sum(
        1
        for message in messages
        if not isinstance(message["content"], str)
        for part in message["content"]
        if part["type"] == "image"
    )


def placed_images(row: Row, prompt: Turns, answers: Mapping[str, list[Message]]) -> list[Any]:
    """The row's images, each with its placeholder in the prompt (plain-text prompts get one
    before the first user text, as TRL's prepare_multimodal_messages does); answers hold none."""
    images = row.row_images()
    placeholders = image_placeholders(prompt.messages)
    if placeholders == 0 and images and prompt.all_strings:
        user = next(message for message in prompt.messages if message["role"] == "user")
        user["content"] = [{"type": "image", "text": None} for _ in images] + user["content"]
        placeholders = len(images)
    for canon, messages in answers.items():
        if image_placeholders(messages):
            raise row.fail(
                f"`{row.name(canon)}` holds an image part",
                "Images belong to the prompt: write the answers as text.",
            )
    row.check_placeholders(placeholders, len(images))
    return images
