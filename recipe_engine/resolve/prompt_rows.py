"""Prompts as TRL's online trainers take them (GRPO, RLOO): the `make` of the prompt row shapes
(`row_shapes.SHAPES`).

A prompt is text (`prompts`; through the chat template: `chat_prompts`), messages ending with
a user turn (`chat_prompts`), or, with images, one user turn of parts (`vlm_prompts`). The
row's other columns (a reference `answer`, a `solution`, a task's metadata) go with it as they
are written: TRL hands every column but the prompt to the reward functions, by name
(`Layout.passed`). TRL drops a column named `completion` there (it names the generated
answers), so a split's `completion` reaches the rewards as `answer`.
"""

from __future__ import annotations

from typing import Any

from recipe_engine.resolve.converters import (
    Row,
    TrlRow,
    alpaca_history,
    image_tokens_as_parts,
    json_list,
)

# What the rewards get a column under, where TRL would drop its own name.
PASSED_AS = {"completion": "answer"}


def prompt_row(row: Row) -> TrlRow:
    """A plain-text prompt, after the row's `system` text where it has one."""
    return {"prompt": row.plain_prompt(row.text("prompt")), **_passed(row)}


def chat_prompt_row(row: Row) -> TrlRow:
    """The prompt as messages ending with a user turn: the row's own, or its text as one user
    turn (after its `system` message and `history` turns)."""
    value = json_list(row.get("prompt"))
    if isinstance(value, list):
        prompt, _ = row.validated(row.with_system(value), row.name("prompt"), False, last="user")
    else:
        turns = [*alpaca_history(row), {"role": "user", "content": row.text("prompt")}]
        prompt, _ = row.validated(row.with_system(turns), row.name("prompt"), False, last="user")
    return {"prompt": prompt, **_passed(row)}


def vlm_prompt_row(row: Row) -> TrlRow:
    """The images and one user turn: an image placeholder per image, then the text."""
    images = row.row_images()
    prompt: Any = image_tokens_as_parts(row.text("prompt"))
    if isinstance(prompt, str):
        prompt = [{"type": "image", "text": None} for _ in images] + [
            {"type": "text", "text": prompt}
        ]
    row.check_placeholders(sum(part["type"] == "image" for part in prompt), len(images))
    user = row.with_system([{"role": "user", "content": prompt}], parts=True)
    return {"images": images, "prompt": user, **_passed(row)}


def _passed(row: Row) -> dict[str, Any]:
    """The row's columns its rewards read, under the names they get them by."""
    return {name: row.record.get(column) for name, column in row.layout.passed}
