"""Rows converted one by one (`Dataset.map`) into the shape their format calls for: a
`RowConverter` reads and checks every value the registry's converters (`formats.SHAPES`,
`formats.REGISTRY`) ask for, with errors that name the split, the row and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.converters import IMAGE_TOKEN, SHAREGPT_ROLES, given_keys, json_list
from recipe_engine.resolve.detection import Layout
from recipe_engine.resolve.formats import ROLES, SHAPES

_COLUMNS_FIX = "Map your column with data.columns.{canon}=<name> or fix the row."
# The role the last message must have -> (what ends so, the fix where it does not): a
# conversation ends with the reply the model learns, a preference pair's prompt with the turn
# its answers reply to.
_LAST = {
    "assistant": ("", "End each conversation with the assistant reply the model should learn."),
    "user": (
        " of the prompt",
        "End the prompt with the user turn that the chosen and rejected answers reply to.",
    ),
}


def row_error(label: str, row: int, problem: str, fix: str) -> RecipeError:
    return RecipeError(f"{label}, row {row}: {problem}. {fix}", key="data.path")


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
        return SHAPES[self.layout.output].make(self)

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
        return self.checked_text(canon, value, required)

    def checked_text(self, canon: str, value: Any, required: bool = True) -> str:
        """`value`, read from column `canon`, as a string (non-empty when `required`)."""
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
        """The row's messages as its format reads them, validated, and whether every content
        was a plain string (`parts`: contents as image/text parts)."""
        messages, name = self.layout.given.messages(self, parts)
        return self.validated(messages, name, parts)

    def message_list(self, canon: str, shape: str, example: str) -> list[Any]:
        value = json_list(self.get(canon))  # CSV cells hold the conversation as JSON
        if not isinstance(value, list) or not value:
            raise self.fail(
                f"`{self.name(canon)}` must be a non-empty list of {shape} objects, "
                f"got {type(value).__name__}",
                f"Write it like {example}.",
            )
        return value

    def validated(
        self, value: list[Any], name: str, parts: bool, last: str = "assistant"
    ) -> tuple[list[dict[str, Any]], bool]:
        """Role/content messages checked (`last`: the role the last one must have), with
        contents as strings or (`parts`) image/text parts."""
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
        self.check_turns([m["role"] for m in result], last)
        return result, all_strings

    def check_turns(self, roles: list[str], last: str = "assistant") -> None:
        """An optional system message first, then user and assistant turns in alternation,
        ending with the assistant reply the model learns (what chat templates assume), or
        with `last`."""
        for j, role in enumerate(roles, start=1):
            expected = _expected_role(roles[: j - 1])
            if role not in expected:
                raise self.fail(
                    f"message {j} is from `{role}` where {' or '.join(expected)} comes "
                    f"(roles: {', '.join(roles)})",
                    "Start with an optional system message, then alternate user and assistant "
                    "turns.",
                )
        if roles[-1] != last:
            where, fix = _LAST[last]
            raise self.fail(f"the last message{where} is from `{roles[-1]}`, not `{last}`", fix)

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
        value = json_list(value)  # CSV cells hold lists as JSON
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


def _sharegpt_hint(message: Any) -> str:
    if {"from", "value"} <= given_keys(message).keys():
        return " (it has `from`/`value` keys: that is ShareGPT; set data.format=sharegpt)"
    return ""


def _expected_role(before: list[str]) -> tuple[str, ...]:
    turns = [r for r in before if r != "system"]
    if not before:
        return ("system", "user")
    return ("user",) if not turns or turns[-1] == "assistant" else ("assistant",)
