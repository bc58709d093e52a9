"""Qwen-VL's rows (`data.format: qwen_vl`, or found by `auto` where a tag is): the images a turn
shows are named inline, `<img>PATH</img>` where they stand in its text (`parts.IMAGE_TAG`), as
Qwen-VL's own fine-tuning files write them (ShareGPT `conversations` of `from` / `value` turns:
`Picture 1: <img>pictures/1.png</img>\\nWhat is this?`) and ms-swift's Qwen-VL rows do
(`query` / `response`; also `prompt` / `completion`, with an optional `history` and `system`).

Each tag becomes an image part at its place (its text removed), its path read as every image
path is (relative to the data file; a remote URL refused as any remote image is: `parts`,
`rows`), so on a vision-language stage the rows are TRL's vision conversations (`images` +
`messages`), and a text-only stage refuses them as it refuses any image rows. Read as tags
otherwise, they would be words a model learns to write. Only a user's turn shows an image: a
tag in an answer is refused with its row. Text that holds `<img>...</img>` as words (a file
about HTML) reads as words with `data.format` set to the format it is written in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipe_engine.resolve.converters import (
    SHAREGPT_EXAMPLE,
    Message,
    Row,
    alpaca_history,
    sharegpt_as_chatml,
)
from recipe_engine.resolve.data_format import PROMPT_ALIASES, DataFormat
from recipe_engine.resolve.parts import IMAGE, IMAGE_TAG_EXAMPLE, TEXT, Part, tagged_parts
from recipe_engine.resolve.row_shapes import CONVERSATIONS

_TAGGED = ("messages", "conversations", "prompt", "completion", "history")


def qwen_vl_messages(row: Row, parts: bool) -> tuple[list[Any], str]:
    """The row's turns (its conversation's, or its `history`'s then its prompt and
    completion), each `<img>` tag an image part in place. Contents become parts wherever a
    tag is, whatever `parts` says: a stage that reads the rows as text then refuses the
    image with its row, rather than training on the tag as words."""
    if row.get("messages", required=False) is not None:
        name = row.name("messages")
        turns = sharegpt_as_chatml(
            row, row.message_list("messages", "{from, value}", SHAREGPT_EXAMPLE), name
        )
        where = [f"message {j} of `{name}`" for j in range(1, len(turns) + 1)]
        return [_shown(row, turn, at) for turn, at in zip(turns, where, strict=True)], name
    history = alpaca_history(row)
    turns = [
        *history,
        {"role": "user", "content": row.text("prompt")},
        {"role": "assistant", "content": row.text("completion")},
    ]
    where = [f"turn {j} of `{row.name('history')}`" for j in range(1, len(history) + 1)]
    where += [f"`{row.name('prompt')}`", f"`{row.name('completion')}`"]
    return [_shown(row, turn, at) for turn, at in zip(turns, where, strict=True)], "qwen_vl row"


def _shown(row: Row, turn: Mapping[str, Any], where: str) -> Message:
    """`turn` with the images its text names as image parts in place (`where`: how errors
    name it); a turn without tags, or written as parts, as it is."""
    content = turn.get("content")
    found = tagged_parts(content) if isinstance(content, str) else None
    if found is None:
        return dict(turn)
    if turn.get("role") != "user":
        raise row.fail(
            f"{where} names an image with an `<img>` tag, but it is the {turn.get('role')}'s "
            "turn: only the user's turns show the model images",
            "Move the image to the user's turn, or set data.format to the format the rows "
            "are written in (sharegpt, prompt_completion) to read the tags as words.",
        )
    if any(part.kind == IMAGE and not part.source for part in found):
        raise row.fail(
            f"{where} has an empty `<img></img>` tag",
            f"Put the image's path between the tags, like {IMAGE_TAG_EXAMPLE}.",
        )
    return {**turn, "content": [_written(part) for part in found]}


def _written(part: Part) -> dict[str, Any]:
    """A part as a role/content message holds it (`{"type": "image", "image": SOURCE}`)."""
    if part.kind == IMAGE:
        return {"type": IMAGE, "image": part.source}
    return {"type": TEXT, "text": part.text}


FORMAT = DataFormat(
    "qwen_vl",
    ("messages", "conversations", "prompt", "completion"),
    (),  # any of its columns, where a tag is (`image_tags`)
    "`<img>` tags in `conversations` or `query`+`response` text (Qwen-VL)",
    CONVERSATIONS,
    messages=qwen_vl_messages,
    conversation=True,
    aliases={"prompt": PROMPT_ALIASES, "completion": ("response", "answer")},
    image_tags=_TAGGED,
    doc_columns="`<img>PATH</img>` tags in the text of `conversations` (ShareGPT `[{from, "
    "value}]`, Qwen-VL's) or of `query` / `response` (ms-swift's; also `prompt` / "
    "`completion`), optional `history`, `system` (detected where a tag is)",
    doc_trl="`images` + `messages`: each tag an image part where it stood (a text-only model "
    "refuses them)",
)
