"""How a split's rows are read (its `Layout`), from what it holds (its `survey.Survey`):
`data.format` as set, or detected from the columns by the formats' own declarations
(`formats.REGISTRY`).

Columns that state what rows are judged (chosen / rejected, a label) decide first: a split with
them is preference rows or unpaired feedback whatever else it has, so a DPO stage never reads
a conversation of pairs as SFT conversations. Then a conversation column states the format,
then the other columns. Where a split names a column the way another tool does (ms-swift's
`query`, LLaMA-Factory's `kto_tag`, `chosen_messages`), the format's aliases read it. A format
that reads images named inline (Qwen-VL's `<img>` tags: `DataFormat.image_tags`) is found where
the survey saw a tag in its columns, before any format that would read the tags as words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.format_hints import half_there, undetectable
from recipe_engine.resolve.formats import (
    JUDGED_PROMPT_ALIASES,
    REGISTRY,
    DataFormat,
    canonical_columns,
)
from recipe_engine.resolve.prompt_rows import PASSED_AS
from recipe_engine.resolve.prompt_turns import CONVERSATION, IMPLICIT, INSTRUCTION, PROMPT
from recipe_engine.resolve.survey import MESSAGE_KEYS, SHAREGPT_KEYS, Survey

# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """How a split's rows are read: the input format (`formats.REGISTRY`), the column behind
    every canonical name, and whether rows carry images."""

    fmt: str  # a name in formats.REGISTRY
    columns: Mapping[str, str]  # canonical name -> the split's column
    images: bool
    chat: bool = False  # plain prompt/completion text as one user and one assistant turn
    # The rows are messages (a conversation, messages in a column that may hold them, turns
    # before the prompt): the chat shape, whatever data.chat_template says.
    conversational: bool = False
    # Judged rows: where the prompt is (`prompt_turns`: prompt | instruction | conversation |
    # implicit), and whether the conversation ends with the first answer (ms-swift's).
    prompt_from: str = PROMPT
    answer_in_conversation: bool = False
    # Canonical names read under another tool's name: (canonical, column).
    aliased: tuple[tuple[str, str], ...] = ()
    # Columns carried on as written, to an online trainer's rewards: (name given, column).
    passed: tuple[tuple[str, str], ...] = ()

    @property
    def given(self) -> DataFormat:
        return REGISTRY[self.fmt]

    @property
    def output(self) -> str:
        """The row shape TRL gets (`row_shapes.SHAPES`)."""
        return self.given.shapes.pick(self.images, self.chat or self.conversational).name

    @property
    def implicit_prompt(self) -> bool:
        return self.prompt_from == IMPLICIT

    def describe(self) -> str:
        with_images = self.images and not self.given.images  # `vlm` says so itself
        how = [f"`{column}` as {canon}" for canon, column in self.aliased]
        if self.given.judged:
            how.insert(0, self._prompt_described())
        said = f" ({'; '.join(filter(None, how))})" if any(how) else ""
        return f"{self.fmt}{' with images' if with_images else ''}{said}"

    def _prompt_described(self) -> str:
        if self.prompt_from == IMPLICIT:
            return "implicit prompt"
        if self.prompt_from == PROMPT:
            return ""
        column = "instruction" if self.prompt_from == INSTRUCTION else "messages"
        where = f"prompt from `{self.columns[column]}`"
        if self.answer_in_conversation:
            where += f", {self.given.answers[0]} its last turn"
        return where


def resolve_layout(setting: str, seen: Survey, mapping: Mapping[str, str]) -> Layout:
    """The layout for `data.format` = `setting` (auto: detected) and `data.columns`."""
    _check_mapped_images(seen, mapping)
    conversation = _conversation_column(seen, mapping)
    given = _detect(seen, mapping, conversation) if setting == "auto" else REGISTRY[setting]
    aliased = _aliased(given, seen, mapping)
    prompt_from = _prompt_source(given, seen, mapping, aliased) if given.judged else PROMPT
    columns = _columns_read(given, mapping, aliased, conversation)
    answer_first = given.answers[0] if given.answers else ""
    in_conversation = prompt_from == CONVERSATION and not _has(answer_first, seen, mapping, aliased)
    conversable = [columns[canon] for canon in given.conversable]
    messages = [columns["messages"]] if given.conversation else []
    images = (
        given.images
        or columns["images"] in seen.present
        or any(column in seen.image_parts for column in (*conversable, *messages))
        or _tagged(given, seen, columns)
    )
    if images and not given.shapes.images.images:
        raise RecipeError(
            f"{seen.label} has images, but {given.expected} rows have no form with images. "
            "Drop the images (or the `images` column), or write the rows as `messages`.",
            key="data.format",
        )
    return Layout(
        given.name,
        columns,
        images=images,
        conversational=prompt_from == CONVERSATION
        or columns["history"] in seen.present
        or any(_holds_messages(seen, column) for column in conversable)
        or (prompt_from == IMPLICIT and _dialogues(seen, given, columns)),
        prompt_from=prompt_from,
        answer_in_conversation=in_conversation,
        aliased=tuple(aliased.items()),
        passed=_passed(given, seen, columns),
    )


def _columns_read(
    given: DataFormat, mapping: Mapping[str, str], aliased: Mapping[str, str], conversation: str
) -> dict[str, str]:
    """The split's column behind every canonical name as `given` reads it: mapped, under
    another tool's name (`aliased`), or as named; conversation formats (and judged rows) read
    one conversation column: the mapped one, `messages` or `conversations`."""
    columns = {canon: mapping.get(canon, canon) for canon in canonical_columns()}
    columns.update(aliased)
    if given.conversation or given.judged:
        columns["messages"] = columns["conversations"] = conversation
    return columns


def _tagged(given: DataFormat, seen: Survey, columns: Mapping[str, str]) -> bool:
    """Whether a column `given` reads inline `<img>` tags from holds one (`image_tags`)."""
    return any(columns[canon] in seen.image_tags for canon in given.image_tags)


def _passed(
    given: DataFormat, seen: Survey, columns: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    """The split's columns a format that passes columns on does not read itself, each under
    the name the rewards get it by."""
    if not given.passes_columns:
        return ()
    read = {columns[canon] for canon in (*given.columns, "images", "system", "history")}
    return tuple((PASSED_AS.get(c, c), c) for c in seen.present if c not in read)


def _dialogues(seen: Survey, given: DataFormat, columns: Mapping[str, str]) -> bool:
    """The answers are whole dialogues written as text (Anthropic HH): read as messages."""
    return any(columns[canon] in seen.dialogues for canon in given.answers)


def _holds_messages(seen: Survey, column: str) -> bool:
    keys = seen.message_keys.get(column, frozenset())
    return MESSAGE_KEYS <= keys or SHAREGPT_KEYS <= keys


def _has(canon: str, seen: Survey, mapping: Mapping[str, str], aliased: Mapping[str, str]) -> bool:
    return canon in mapping or canon in seen.present or canon in aliased


def _aliased(given: DataFormat, seen: Survey, mapping: Mapping[str, str]) -> dict[str, str]:
    """The canonical columns a split has under another tool's name (`DataFormat.aliases`):
    only where neither the canonical name nor a mapping says otherwise."""
    found = {}
    for canon, names in given.aliases.items():
        if canon in mapping or canon in seen.present:
            continue
        alias = next((name for name in names if name in seen.present), None)
        if alias is not None:
            found[canon] = alias
    return found


def _prompt_source(
    given: DataFormat, seen: Survey, mapping: Mapping[str, str], aliased: dict[str, str]
) -> str:
    """Where a judged row's prompt is: its prompt column, an Alpaca instruction, another
    tool's name for a prompt (which `aliased` gains), a conversation, or the answers'
    shared turns."""

    def has(canon: str) -> bool:
        return _has(canon, seen, mapping, {})

    if has(PROMPT):
        return PROMPT
    if has(INSTRUCTION):
        return INSTRUCTION
    alias = next((name for name in JUDGED_PROMPT_ALIASES if name in seen.present), None)
    if alias is not None:
        aliased[PROMPT] = alias
        return PROMPT
    return CONVERSATION if has("messages") or has("conversations") else IMPLICIT


def _conversation_column(seen: Survey, mapping: Mapping[str, str]) -> str:
    for canon in ("messages", "conversations"):
        if canon in mapping:
            return mapping[canon]
    for canon in ("messages", "conversations"):
        if canon in seen.present:
            return canon
    return "messages"


def _check_mapped_images(seen: Survey, mapping: Mapping[str, str]) -> None:
    """Images are optional per row, so a mapping to a column that is not there would drop
    them all silently."""
    name = mapping.get("images")
    if name is not None and name not in seen.names:
        raise RecipeError(
            f"data.columns.images names `{name}`, but {seen.label} has no such column "
            f"(columns: {', '.join(seen.names)}). Map the column that holds the image paths.",
            key="data.columns.images",
        )


def detection_order() -> list[DataFormat]:
    """The formats `auto` tries: judged rows first (chosen / rejected or a label state what
    the rows are for, whatever else a split has), then conversations (a conversation column
    states the format before any other column does), then the rest; among equals, the one that
    needs more columns first (`messages`+`tools` before `messages`)."""
    detected = [given for given in REGISTRY.values() if given.detected]
    return sorted(
        detected,
        key=lambda given: (
            not given.judged,
            not given.image_tags,  # found only where tags are, which the others read as words
            not given.conversation,
            -len(given.needs),
        ),
    )


def _others_there(
    given: DataFormat, seen: Survey, mapping: Mapping[str, str], aliased: Mapping[str, str]
) -> bool:
    """Whether a column another format reads (as named, mapped, or under an alias) is there,
    but for those `given` reads itself (ms-swift's `response` alone is its pretraining text,
    though `response` is also another tool's name for a completion)."""
    own = {*given.columns, *(mapping.get(c, aliased.get(c, c)) for c in given.columns)}
    others = {
        name
        for other in REGISTRY.values()
        if other is not given
        for canon in other.columns
        for name in (canon, *other.aliases.get(canon, ()))
    }
    return any(name in seen.present or name in mapping for name in others - own)


def _detect(seen: Survey, mapping: Mapping[str, str], conversation: str) -> DataFormat:
    def fits(given: DataFormat) -> bool:
        aliased = _aliased(given, seen, mapping)
        if not all(any(_has(c, seen, mapping, aliased) for c in group) for group in given.needs):
            return False
        if given.alone and _others_there(given, seen, mapping, aliased):
            return False
        if given.image_tags and not _tagged(
            given, seen, _columns_read(given, mapping, aliased, conversation)
        ):
            return False
        return not given.conversation or given.message_keys(seen.message_keys.get(conversation))

    # Explicitly mapped columns state the intended format first, so a misspelt mapping gets the
    # row-level "`x` (data.columns.y) is missing" error instead of another format's.
    for explicit in (True, False):
        for given in detection_order():
            if fits(given) and (not explicit or any(n in mapping for n in given.columns)):
                return given
    order = detection_order()
    raise half_there(seen, mapping, order) or undetectable(seen, order)
