"""Unpaired feedback (a prompt, one completion and whether it is desirable) as TRL's
`KTOTrainer` takes it: the `make` of the unpaired row shapes (`row_shapes.SHAPES`).

Plain text stays text (`unpaired`) or goes through the chat template (`chat_unpaired`,
`data.chat_template`); conversations always become `chat_unpaired` (`vlm_unpaired` with
images). The prompt is read where the split's layout says (`prompt_turns`); the completion is a
`completion` column (an Alpaca file's `output`), or the assistant's last turn of a
conversation (LLaMA-Factory's and ms-swift's KTO files: `messages` + `label`). The label is a
boolean (`true` / `false`; in CSV also `1` / `0`, `yes` / `no`).
"""

from __future__ import annotations

from recipe_engine.resolve.converters import Message, Row, TrlRow
from recipe_engine.resolve.prompt_turns import (
    IMPLICIT,
    Turns,
    answer,
    answered_conversation,
    implicit_turns,
    placed_images,
    plain_prompt,
    prompt_turns,
)

# How labels are written where a file cannot hold a boolean (CSV cells, hand-written JSON).
LABEL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def unpaired_row(row: Row) -> TrlRow:
    """TRL's standard unpaired preference: the prompt and the completion as text."""
    return {
        "prompt": plain_prompt(row),
        "completion": row.text("completion"),
        "label": label(row),
    }


def chat_unpaired_row(row: Row) -> TrlRow:
    """TRL's conversational unpaired preference: the prompt's messages, the completion one
    assistant turn."""
    prompt, completion = _judged(row, parts=False)
    return {"prompt": prompt.messages, "completion": completion, "label": label(row)}


def vlm_unpaired_row(row: Row) -> TrlRow:
    """KTO's vision rows: the images, the prompt's messages of parts, the completion."""
    prompt, completion = _judged(row, parts=True)
    images = placed_images(row, prompt, {"completion": completion})
    return {
        "images": images,
        "prompt": prompt.messages,
        "completion": completion,
        "label": label(row),
    }


def _judged(row: Row, parts: bool) -> tuple[Turns, list[Message]]:
    """The prompt and the one completion the label judges."""
    if row.layout.prompt_from == IMPLICIT:  # the completion column holds the whole turn list
        prompt, (completion,) = implicit_turns(row, ("completion",), parts)
        return prompt, completion
    if row.layout.answer_in_conversation:
        conversation, all_strings = answered_conversation(row, "messages", parts)
        return Turns(conversation[:-1], all_strings), conversation[-1:]
    return prompt_turns(row, parts), answer(row, "completion", parts)


def label(row: Row) -> bool:
    value = row.get("label")
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, str | int) else None
    if word in LABEL_WORDS:
        return LABEL_WORDS[word]
    raise row.fail(
        f"`{row.name('label')}` is {value!r}, not true or false",
        "Label each completion true (desirable) or false (undesirable), or read the rows "
        "without their label as instruction rows (data.format=messages, prompt_completion or "
        "alpaca).",
    )
