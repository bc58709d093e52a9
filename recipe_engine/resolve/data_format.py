"""The protocol of a data format (`DataFormat`): what the format registry
(`formats.REGISTRY`) holds of each format users write rows in, the engine's own (`formats`,
`peer_formats/`) and plug-ins' (`plugins`) alike. It stands apart from the registry, as a
trainer kind's protocol (`trainers.kind`) stands apart from the trainers' registry, so that a
format's own module (`peer_formats/<name>.py`) imports it without importing the registry that
finds the module. `formats` re-exports it (`recipe_engine.resolve.formats.DataFormat`, the name
plug-ins use). Nothing heavy is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.resolve.converters import Row
from recipe_engine.resolve.row_shapes import Shapes
from recipe_engine.trainers.kind import (
    INSTRUCTION_ROWS,
    PREFERENCE_ROWS,
    PROMPT_ROWS,
    UNPAIRED_ROWS,
)

# Other names for a prompt (ms-swift's `query`, Axolotl's `chatml.intel` `question`), read as
# the prompt where a split has no `prompt` column.
PROMPT_ALIASES = ("query", "question")


@dataclass(frozen=True)
class DataFormat:
    """A format users write rows in (`data.format`)."""

    name: str
    columns: tuple[str, ...]  # the canonical columns that state it (a mapping of one names it)
    needs: tuple[tuple[str, ...], ...]  # detection: a present column of each group
    expected: str  # how the refusal of an undetectable split describes it
    shapes: Shapes
    # Its rows as role/content messages (`row`, whether contents become parts) and the name
    # errors give them; None: read by the shape's `make`.
    messages: Callable[[Row, bool], tuple[list[Any], str]] | None = None
    # Canonical columns that may hold role/content messages: where the survey finds them in
    # one, the rows are conversations (the chat shape, whatever data.chat_template says), and
    # image parts in one make image rows.
    conversable: tuple[str, ...] = ()
    # Reads one conversation column: the mapped one, `messages` or `conversations`.
    conversation: bool = False
    # Detection: the keys of the messages in that column (None: not read) fit the format.
    message_keys: Callable[[frozenset[str] | None], bool] = lambda keys: True
    images: bool = False  # its rows always carry images
    detected: bool = True  # `auto` can find it
    rows: str = INSTRUCTION_ROWS  # the kind of rows (trainers.kind): which trainers take them
    # The columns judged (preference: chosen, rejected; unpaired: the completion); a
    # conversation column may hold the prompt, or the prompt and the first of them.
    answers: tuple[str, ...] = ()
    # Canonical name -> the names other tools give that column, read when it is absent.
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Detection: only where no column another format reads (under any of its names) is there
    # but the one it reads itself (a column as common as `text` states nothing beside another
    # format's).
    alone: bool = False
    # Canonical columns whose text may name images with Qwen-VL's inline `<img>SOURCE</img>`
    # tags (`parts.IMAGE_TAG`), which its `messages` converter reads as image parts: such a
    # format is detected only where the survey finds a tag in one of them (and before any
    # format that would read the tags as words), and its rows then carry images.
    image_tags: tuple[str, ...] = ()
    # The docs' table of formats (`format_table`): its columns, and what TRL gets of them.
    doc_columns: str = ""
    doc_trl: str = ""

    @property
    def judged(self) -> bool:
        """Preference rows: their prompt may come from several places (`prompt_turns`)."""
        return self.rows in (PREFERENCE_ROWS, UNPAIRED_ROWS)

    @property
    def passes_columns(self) -> bool:
        """Its rows carry the split's other columns on, as written (to a trainer's rewards)."""
        return self.rows == PROMPT_ROWS
