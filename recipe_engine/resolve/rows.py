"""Rows converted one by one (`Dataset.map`) into the shape their format calls for: a
`RowConverter` reads and checks every value the registry's converters (`row_shapes.SHAPES`,
`formats.REGISTRY`) ask for, with errors that name the split, the row and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.converters import (
    IMAGE_TOKEN,
    SHAREGPT_ROLES,
    ContentPart,
    Message,
    TrlRow,
    given_keys,
    image_tokens_as_parts,
    json_list,
)
from recipe_engine.resolve.detection import Layout
from recipe_engine.resolve.formats import REGISTRY, ROLES
from recipe_engine.resolve.parts import (
    IMAGE,
    PARTS_EXAMPLE,
    BadPart,
    Part,
    RemoteImage,
    image_source,
    read_part,
)
from recipe_engine.resolve.row_shapes import SHAPES

_COLUMNS_FIX = "Map your column with data.columns.{canon}=<name> or fix the row."
_REMOTE_FIX = "Download the image and give its path (relative to the data file)."
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
        self.inline_images: list[Any] = []

    def __call__(self, record: Mapping[str, Any], index: int) -> TrlRow:
        self.index, self.record = index, record  # read by fail()/get() for error messages
        self.inline_images = []  # images the row's parts name themselves, in order
        return SHAPES[self.layout.output].make(self)

    # ----------------------------------------------------------------------- access

    def renamed(self, columns: Mapping[str, str]) -> RowConverter:
        """This row read with some canonical names behind other columns (the same record,
        errors and images)."""
        view = copy.copy(self)
        view.layout = dataclasses.replace(self.layout, columns={**self.layout.columns, **columns})
        return view

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

    def conversation(self, parts: bool) -> tuple[list[Message], bool]:
        """The row's messages as its format reads them (after the row's `system` message,
        where it has one), validated, and whether every content was a plain string (`parts`:
        contents as image/text parts)."""
        messages, name = self.layout.given.messages(self, parts)
        return self.validated(self.with_system(messages), name, parts)

    def system_text(self) -> str:
        """The row's `system` column (a system prompt beside its turns), or ""."""
        return self.text("system", required=False)

    def with_system(self, messages: list[Any], parts: bool = False) -> list[Any]:
        """`messages` after the row's system message, unless they begin with their own."""
        system = self.system_text()
        first = messages[0] if messages else None
        if not system.strip() or (isinstance(first, Mapping) and first.get("role") == "system"):
            return messages
        content: Any = [{"type": "text", "text": system}] if parts else system
        return [{"role": "system", "content": content}, *messages]

    def plain_prompt(self, prompt: str) -> str:
        """A plain-text prompt after the row's system text, where it has one."""
        system = self.system_text()
        return f"{system}\n\n{prompt}" if system.strip() else prompt

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
    ) -> tuple[list[Message], bool]:
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
            if parts and role == "user":  # LLaVA-style `<image>` marks place its images
                content = image_tokens_as_parts(content)
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
            problem = f"the last message{where} is from `{roles[-1]}`, not `{last}`"
            raise self.fail(problem + self._judged_hint(), fix)

    def _judged_hint(self) -> str:
        """Where SFT conversations are read from a row that holds judged answers (a format set
        by hand), what would read them: the column that marks such rows (`rejected`, `label`,
        or another tool's name for it)."""
        if self.layout.given.judged:
            return ""
        for given in (given for given in REGISTRY.values() if given.judged):
            marker = given.needs[0][0]
            names = (marker, *given.aliases.get(marker, ()))
            found = next((name for name in names if self.record.get(name) is not None), None)
            if found:
                return (
                    f" (this row has `{found}`: {given.expected} rows, which "
                    f"data.format={given.name} reads)"
                )
        return ""

    def text_content(self, j: int, content: Any) -> str:
        if isinstance(content, list) and content:
            content = self.text_of_parts(j, content)
        if not isinstance(content, str):
            raise self.fail(
                f"message {j} content must be a string or a list of parts, got "
                f"{type(content).__name__}",
                "Write the message text as a string.",
            )
        if not content.strip():
            raise self.fail(f"message {j} has empty content", "Fill it in or remove the row.")
        return content

    def parts(self, j: int, content: Any) -> list[ContentPart]:
        """Content parts in any spelling (`parts.read_part`) as image placeholders and text
        parts; an image a part names itself joins the row's `inline_images`."""
        if not isinstance(content, list) or not content:
            raise self.fail(
                f"message {j} content must be a string or a non-empty list of parts, "
                f"got {type(content).__name__}",
                f"Use {PARTS_EXAMPLE}.",
            )
        out = []
        for part in (self.part(j, given) for given in content):
            if part.kind == IMAGE:
                if part.source is not None:
                    self.inline_images.append(self.image(len(self.inline_images) + 1, part.source))
                out.append({"type": "image", "text": None})
            else:
                out.append({"type": "text", "text": part.text})
        return out

    def text_of_parts(self, j: int, content: list[Any]) -> str:
        """The text of a message written as parts, for a stage that trains on text only."""
        texts = []
        for part in (self.part(j, given) for given in content):
            if part.kind == IMAGE:
                raise self.fail(
                    f"message {j} has an image part, but this stage reads its rows as text "
                    "(a text-only model, or no image in the rows surveyed)",
                    "Train a vision-language model on image rows, or remove the image part.",
                )
            texts.append(part.text)
        return "\n".join(texts)

    def part(self, j: int, given: Any) -> Part:
        try:
            return read_part(given)
        except BadPart as bad:
            raise self.fail(
                f"message {j} has {bad}", f"Write parts like {PARTS_EXAMPLE}."
            ) from None

    # ----------------------------------------------------------------------- images

    def check_placeholders(self, placeholders: int, images: int) -> None:
        if placeholders != images:
            raise self.fail(
                f'{placeholders} image placeholder(s) ({{"type": "image"}} or {IMAGE_TOKEN}) '
                f"but {images} image(s) in `{self.name('images')}`",
                "Give one entry in the images list per image placeholder.",
            )

    def row_images(self) -> list[Any]:
        """The row's images: its `images` column's, or those its content parts name (read
        once its messages are), never both."""
        listed = self.images(self.get("images", required=False))
        if listed and self.inline_images:
            raise self.fail(
                f"images are listed in `{self.name('images')}` and named in content parts too",
                'Name each image once: in the images column with {"type": "image"} '
                "placeholders, or in the parts themselves.",
            )
        return listed or self.inline_images

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
        try:
            source = image_source(item)
        except RemoteImage as remote:
            raise self.fail(f"{remote} (image {k})", _REMOTE_FIX) from None
        except ValueError as bad:
            raise self.fail(f"image {k}: {bad}", "Fix the URI, or give the image's path.") from None
        if source.data is not None:
            self._check_readable(io.BytesIO(source.data), f"the data: URI of image {k}")
            return {"bytes": source.data, "path": None}
        path = self._image_path(k, str(source.path))
        self._check_readable(path, f"image file {path} (image {k})")
        # Keep the path, not pixels: `datasets` decodes lazily, so big VLM sets fit in memory.
        return {"path": str(path), "bytes": None}

    def _image_path(self, k: int, written: str) -> Path:
        """An image path as written: absolute, or relative to the data file's folder (or, for
        files written relative to a project's root, the nearest folder above it that has it)."""
        path = Path(written).expanduser()
        if path.is_absolute() or self.base_dir is None:
            found = path if path.is_file() else None
        else:
            folders = (self.base_dir, *self.base_dir.parents)
            found = next((f / path for f in folders if (f / path).is_file()), None)
        if found is None:
            shown = path if path.is_absolute() or self.base_dir is None else self.base_dir / path
            raise self.fail(
                f"image file {shown} (image {k}) does not exist",
                "Image paths are relative to the data file's folder; fix the path or the row.",
            )
        return found

    def _check_readable(self, image: Any, what: str) -> None:
        from PIL import Image

        try:
            with Image.open(image):  # parses the header only: cheap, catches non-images
                pass
        except Exception as exc:  # PIL raises many types for bad files
            raise self.fail(
                f"{what} is not a readable image ({exc})",
                "Replace the file with a PNG/JPEG image.",
            ) from exc


def _sharegpt_hint(message: Any) -> str:
    if {"from", "value"} <= given_keys(message).keys():
        return " (it has `from`/`value` keys: that is ShareGPT; set data.format=sharegpt)"
    return ""


def _expected_role(before: list[str]) -> tuple[str, ...]:
    turns = [r for r in before if r != "system"]
    if not before:
        return ("system", "user")
    return ("user",) if not turns or turns[-1] == "assistant" else ("assistant",)
