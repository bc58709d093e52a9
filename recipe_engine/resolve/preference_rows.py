"""Preference pairs (prompt / chosen / rejected) as TRL's preference trainers (DPO, ORPO) take
them: the `make` of the preference row shapes (`row_shapes.SHAPES`).

Plain-text pairs stay text (`preference`) or go through the chat template as one user and one
assistant turn each (`chat_preference`, `data.chat_template`). Conversations always become
`chat_preference` (`vlm_preference` with images): the prompt's messages (an optional system
message, then alternating turns ending with the user's), each answer one assistant message.
Where the prompt and the answers are read from is the split's layout (`prompt_turns`): a prompt
column, an instruction, a conversation (ending with the user's turn, or with the chosen answer
when only the rejected one has a column), or whole conversations sharing the prompt turns.

Each reads the record through a `rows.RowConverter` (`row`): errors name the split, the row
and the fix. Whether a split's rows are text or conversations is decided once, from its survey
(`detection.Layout`); a row written the other way is refused.
"""

from __future__ import annotations

from typing import NamedTuple

from recipe_engine.resolve.converters import Message, Row, TrlRow
from recipe_engine.resolve.prompt_turns import (
    IMPLICIT,
    IMPLICIT_FIX,
    Turns,
    answer,
    answered_conversation,
    assistant_turn,
    decoded,
    implicit_turns,
    message_like,
    placed_images,
    plain_prompt,
    prompt_turns,
    scalar_text,
    text_of,
)

ANSWERS = ("chosen", "rejected")


class Pair(NamedTuple):
    """A preference pair as messages."""

    prompt: Turns
    chosen: list[Message]
    rejected: list[Message]


# --------------------------------------------------------------------------- row shapes


def preference_row(row: Row) -> TrlRow:
    """TRL's standard preference: the prompt and both answers as text. Without a prompt
    column, the prompt is the text both answers begin with (TRL's implicit prompt)."""
    chosen, rejected = (_plain_answer(row, canon) for canon in ANSWERS)
    if row.layout.prompt_from == IMPLICIT:
        return _implicit_text_pair(row, chosen, rejected)
    _check_differ(row, chosen, rejected)
    return {"prompt": plain_prompt(row), "chosen": chosen, "rejected": rejected}


def _implicit_text_pair(row: Row, chosen: str, rejected: str) -> TrlRow:
    from trl.data_utils import extract_prompt

    _check_differ(row, chosen, rejected)
    split = extract_prompt({"chosen": chosen, "rejected": rejected})
    prompt, starts = split["prompt"], (split["chosen"][:1], split["rejected"][:1])
    if not prompt.strip() or (prompt[-1].isalnum() and all(c.isalnum() for c in starts)):
        # TRL splits at the first differing character; inside a word that is no prompt.
        raise row.fail(
            f"`{row.name('chosen')}` and `{row.name('rejected')}` begin differently: there is "
            "no prompt to read from them",
            IMPLICIT_FIX,
        )
    for canon in ANSWERS:
        if not split[canon].strip():
            raise row.fail(
                f"`{row.name(canon)}` is all prompt: nothing follows the text both answers "
                "begin with",
                "Give each answer its own text after the shared prompt.",
            )
    return split


def chat_preference_row(row: Row) -> TrlRow:
    """TRL's conversational preference: the prompt's messages, each answer one assistant turn."""
    pair = _pair(row, parts=False)
    return {"prompt": pair.prompt.messages, "chosen": pair.chosen, "rejected": pair.rejected}


def vlm_preference_row(row: Row) -> TrlRow:
    """TRL's vision preference rows: the images, the prompt's messages of image/text parts,
    each answer one assistant turn of text parts."""
    pair = _pair(row, parts=True)
    images = placed_images(row, pair.prompt, {"chosen": pair.chosen, "rejected": pair.rejected})
    return {
        "images": images,
        "prompt": pair.prompt.messages,
        "chosen": pair.chosen,
        "rejected": pair.rejected,
    }


# --------------------------------------------------------------------------- pairs


def _pair(row: Row, parts: bool) -> Pair:
    if row.layout.prompt_from == IMPLICIT and not row.layout.conversational:
        pair = _implicit_text_as_turns(row, parts)  # plain text, through the chat template
    elif row.layout.prompt_from == IMPLICIT:
        prompt, (chosen, rejected) = implicit_turns(row, ANSWERS, parts)
        pair = Pair(prompt, chosen, rejected)
    elif row.layout.answer_in_conversation:
        pair = _conversation_pair(row, parts)
    else:
        prompt = prompt_turns(row, parts)
        pair = Pair(prompt, *(answer(row, canon, parts, after=prompt) for canon in ANSWERS))
    _check_differ(row, text_of(pair.chosen), text_of(pair.rejected))
    return pair


def _implicit_text_as_turns(row: Row, parts: bool) -> Pair:
    """Text pairs sharing their beginning: the shared text as the user's turn, the rest of
    each as the assistant's."""
    split = _implicit_text_pair(row, *(_plain_answer(row, canon) for canon in ANSWERS))
    user = [{"role": "user", "content": split["prompt"].strip()}]
    prompt = Turns(*row.validated(row.with_system(user), row.name("chosen"), parts, last="user"))
    return Pair(prompt, *(assistant_turn(split[canon].strip(), parts) for canon in ANSWERS))


def _conversation_pair(row: Row, parts: bool) -> Pair:
    """The conversation ends with the chosen answer (ms-swift's `messages`); the rejected one
    is an answer (`rejected_response`) or a whole conversation (`rejected_messages`)."""
    rejected = decoded(row.get("rejected"))
    if isinstance(rejected, list) and len(rejected) > 1:  # a whole conversation
        named = {"chosen": row.layout.columns["messages"]}
        prompt, (chosen, rejected) = implicit_turns(row.renamed(named), ANSWERS, parts)
        return Pair(prompt, chosen, rejected)
    conversation, all_strings = answered_conversation(row, "messages", parts)
    prompt = Turns(conversation[:-1], all_strings)
    return Pair(prompt, conversation[-1:], answer(row, "rejected", parts))


# --------------------------------------------------------------------------- text


def _plain_answer(row: Row, canon: str) -> str:
    value = scalar_text(row.get(canon))
    if message_like(value) or decoded(value) is not value:
        raise row.fail(
            f"`{row.name(canon)}` holds messages, but this split's first rows hold text there",
            "Write every row's prompt, chosen and rejected one way: all as text, or all as "
            "messages.",
        )
    return row.checked_text(canon, value)


def _check_differ(row: Row, chosen: str, rejected: str) -> None:
    if chosen.strip() == rejected.strip():
        raise row.fail(
            f"`{row.name('chosen')}` and `{row.name('rejected')}` are the same answer: "
            "nothing to prefer",
            "Give a rejected answer that differs from the chosen one, or remove the row.",
        )
