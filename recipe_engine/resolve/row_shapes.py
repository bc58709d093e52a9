"""The shapes of rows TRL's trainers take (`SHAPES`, what `DataSplits.format` reports), each
declared once, as data: how a row is made, whether it carries images, which kind of rows it is
(instruction rows for SFT, preference pairs for DPO / ORPO, unpaired feedback for KTO), the
loss flag it calls for (`plan.trainer_settings`; none for preference rows), how evaluation and
`compare` ask it and what they expect, and its Arrow features.

- ``messages``: ``{"messages": [{"role", "content": str}]}`` (Alpaca and ShareGPT end up here)
- ``prompt_completion``: ``{"prompt": str, "completion": str}``
- ``chat_prompt_completion``: ``{"prompt": [user message], "completion": [assistant message]}``,
  plain-text prompt/completion rows as TRL's conversational prompt-completion, so TRL trains
  them through the chat template (the planner chooses it: `data.chat_template`)
- ``vlm``: ``{"images": [image], "messages": [{"role", "content": [part]}]}``
- ``vlm_prompt_completion``: ``{"images": [image], "prompt": [user message of parts],
  "completion": [assistant message of parts]}``: TRL's conversational prompt-completion with
  images (its vision collator fills the image parts and masks the prompt)
- ``preference``: ``{"prompt": str, "chosen": str, "rejected": str}``: TRL's standard preference
- ``chat_preference``: ``{"prompt": [messages ending with a user turn], "chosen": [assistant
  message], "rejected": [assistant message]}``: TRL's conversational preference, what plain-text
  pairs become through the chat template (`data.chat_template`) and conversations always become
- ``vlm_preference``: ``{"images": [image], "prompt": [user message of parts], "chosen":
  [assistant message of text parts], "rejected": [...]}``: TRL's vision preference collator's rows
- ``unpaired``, ``chat_unpaired``, ``vlm_unpaired``: TRL's unpaired preference (KTO): a
  ``prompt``, one ``completion`` and a boolean ``label`` (the completion is desirable or not), as
  text, as messages, or as messages of parts with ``images``
- ``language_modeling``: ``{"text": str}``: TRL's language modeling (continued pretraining):
  the loss covers the whole text, there is no question to ask it
- ``tool_messages``: ``{"messages": [messages, some with `tool_calls`, `tool` turns], "tools":
  JSON text of the functions' schemas}``: TRL passes ``tools`` to the chat template
- ``prompts``, ``chat_prompts``, ``vlm_prompts``: a ``prompt`` (text, messages ending with a
  user turn, or one user turn of parts with ``images``) and the columns the stage's rewards
  read, as written: rows for the online trainers (GRPO, RLOO), which answer the prompts

A part is ``{"type": "image", "text": None}`` or ``{"type": "text", "text": str}``. A new shape
is one `RowShape` in `SHAPES` (its `make` beside the others: `converters`, `preference_rows`,
`unpaired_rows`). Nothing heavy is imported here: ``datasets`` arrives as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.resolve.converters import (
    Row,
    TrlRow,
    chat_prompt_completion_row,
    messages_row,
    prompt_completion_row,
    text_row,
    vlm_prompt_completion_row,
    vlm_row,
)
from recipe_engine.resolve.preference_rows import (
    chat_preference_row,
    preference_row,
    vlm_preference_row,
)
from recipe_engine.resolve.prompt_rows import chat_prompt_row, prompt_row, vlm_prompt_row
from recipe_engine.resolve.tool_rows import tool_messages_row
from recipe_engine.resolve.unpaired_rows import (
    chat_unpaired_row,
    unpaired_row,
    vlm_unpaired_row,
)
from recipe_engine.trainers.kind import (
    INSTRUCTION_ROWS,
    PREFERENCE_ROWS,
    PROMPT_ROWS,
    UNPAIRED_ROWS,
)

MESSAGES, PROMPT_COMPLETION = "messages", "prompt_completion"
CHAT_PROMPT_COMPLETION = "chat_prompt_completion"
VLM, VLM_PROMPT_COMPLETION = "vlm", "vlm_prompt_completion"
PREFERENCE, CHAT_PREFERENCE = "preference", "chat_preference"
VLM_PREFERENCE = "vlm_preference"
UNPAIRED, CHAT_UNPAIRED, VLM_UNPAIRED = "unpaired", "chat_unpaired", "vlm_unpaired"
LANGUAGE_MODELING, TOOL_MESSAGES = "language_modeling", "tool_messages"
PROMPTS, CHAT_PROMPTS, VLM_PROMPTS = "prompts", "chat_prompts", "vlm_prompts"
# TRL's loss flags, one per kind of instruction rows (`Loss`).
LOSS_FLAGS = ("assistant_only_loss", "completion_only_loss")


@dataclass(frozen=True)
class Loss:
    """The loss flag rows call for: on the completion only (TRL masks the prompt, always
    possible), or on the assistant's turns only, where the chat template can mark them."""

    flag: str | None  # one of LOSS_FLAGS; None: none applies, the loss covers every token
    needs_markers: bool  # only where the chat template marks the turns (MARKED / PATCHED)
    # Where rows have no flag of their own: what the loss covers (`plan`'s note), and the
    # refusal of a flag set true ({name}: the stage, {flag}, {data_format}).
    covers: str = ""
    refusal: str = ""


COMPLETION_ONLY = Loss("completion_only_loss", needs_markers=False)
ASSISTANT_ONLY = Loss("assistant_only_loss", needs_markers=True)
WHOLE_TEXT = Loss(
    None,
    needs_markers=False,
    covers="on the whole text (language-modeling rows: no prompt or assistant turn to mask)",
    refusal="Stage `{name}` trains on language-modeling rows ({data_format}: a `text` column, "
    "continued pretraining), which have no prompt or assistant turn to mask, but "
    "stage.{name}.train.{flag}=true asks for one. Drop the key (the loss covers the whole "
    "text), or give the stage prompt/completion or `messages` rows.",
)


@dataclass(frozen=True)
class Asking:
    """How evaluation and `compare` ask a row: what the model is asked (messages go through
    the chat template, text as it is) and the answer expected (text, or messages)."""

    question: Callable[[Mapping[str, Any]], Any]
    answer: Callable[[Mapping[str, Any]], Any]


CONVERSATION_ASKED = Asking(lambda row: row["messages"][:-1], lambda row: row["messages"][-1:])
PROMPT_ASKED = Asking(lambda row: row["prompt"], lambda row: row["completion"])
# A preference pair is asked its prompt and expected to give the chosen answer.
PREFERENCE_ASKED = Asking(lambda row: row["prompt"], lambda row: row["chosen"])
# A prompt is expected to give its reference `answer`, where the rows have one.
PROMPT_ONLY_ASKED = Asking(lambda row: row["prompt"], lambda row: str(row.get("answer") or ""))


@dataclass(frozen=True)
class RowShape:
    """A shape of rows TRL's trainers take (`DataSplits.format`) and what follows from it."""

    name: str
    columns: tuple[str, ...]  # what TRL reads besides `images`
    conversational: bool  # the columns hold messages (TRL applies the chat template)
    images: bool  # carries images: a vision-language stage only
    prompt_completion: bool
    rows: str  # the kind of rows (trainers.kind): instruction | preference | unpaired
    loss: Loss | None  # None: preference rows (SFT's loss flags do not apply)
    asked: Asking | None  # None: the rows ask nothing (plain text): no exact match applies
    make: Callable[[Row], TrlRow]  # one record -> one TRL row
    features: Callable[[Any], Any]  # the `datasets` module -> the features of such rows
    tools: bool = False  # rows call tools: the chat template must render `tools` and their turns

    @property
    def preference(self) -> bool:
        """Preference pairs (prompt / chosen / rejected): rows for DPO and ORPO."""
        return self.rows == PREFERENCE_ROWS

    @property
    def unpaired(self) -> bool:
        """Unpaired feedback (prompt / completion / label): rows for KTO."""
        return self.rows == UNPAIRED_ROWS

    @property
    def prompts(self) -> bool:
        """Prompts alone (and the columns rewards read): rows for the online trainers."""
        return self.rows == PROMPT_ROWS

    def holds(self, row: Mapping[str, Any]) -> bool:
        """Whether a TRL row (one whose shape was not recorded: a probe's) is of this shape."""
        if not all(column in row for column in self.columns):
            return False
        if ("chosen" in row) != self.preference or ("label" in row) != self.unpaired:
            return False  # a pair, or a judged completion, is not a prompt and a completion
        if self.prompts and "completion" in row:
            return False  # a prompt with its completion is an instruction row
        listed = isinstance(row[self.columns[0]], list)
        return listed == self.conversational and bool(row.get("images")) == self.images


@dataclass(frozen=True)
class Shapes:
    """The shape a format's rows become: as text, through the chat template
    (`data.chat_template=true`), or with images."""

    text: RowShape
    chat: RowShape
    images: RowShape

    def pick(self, images: bool, chat: bool) -> RowShape:
        return self.images if images else self.chat if chat else self.text


# --------------------------------------------------------------------------- features


def _text_features(ds: Any) -> Any:
    return ds.Features({"prompt": ds.Value("string"), "completion": ds.Value("string")})


def _message_features(ds: Any) -> Any:
    return ds.List({"role": ds.Value("string"), "content": ds.Value("string")})


def _part_features(ds: Any) -> Any:
    text = ds.Value("string")
    return ds.List({"role": text, "content": ds.List({"type": text, "text": text})})


def _images(ds: Any) -> Any:
    return ds.List(ds.Image(mode="RGB"))  # decoded to RGB PIL images on access


def _answer_features(ds: Any, columns: tuple[str, ...], each: Any, images: bool) -> Any:
    """`columns` each of `each(ds)` (a `label` a boolean), after the images when there are
    any."""
    features = {"images": _images(ds)} if images else {}
    for column in columns:
        features[column] = ds.Value("bool") if column == "label" else each(ds)
    return ds.Features(features)


# --------------------------------------------------------------------------- shapes


def _conversation(name: str, images: bool, make: Any, features: Any) -> RowShape:
    return RowShape(
        name,
        columns=("messages",),
        conversational=True,
        images=images,
        prompt_completion=False,
        rows=INSTRUCTION_ROWS,
        loss=ASSISTANT_ONLY,
        asked=CONVERSATION_ASKED,
        make=make,
        features=features,
    )


def _pair(name: str, conversational: bool, images: bool, make: Any, features: Any) -> RowShape:
    return RowShape(
        name,
        columns=("prompt", "completion"),
        conversational=conversational,
        images=images,
        prompt_completion=True,
        rows=INSTRUCTION_ROWS,
        loss=COMPLETION_ONLY,
        asked=PROMPT_ASKED,
        make=make,
        features=features,
    )


def _judged(rows: str, name: str, conversational: bool, images: bool, make: Any) -> RowShape:
    """Preference rows: a pair of answers, or one answer with its label."""
    columns = ("prompt", "chosen", "rejected") if rows == PREFERENCE_ROWS else UNPAIRED_COLUMNS
    each = _part_features if images else _message_features if conversational else None
    return RowShape(
        name,
        columns=columns,
        conversational=conversational,
        images=images,
        prompt_completion=False,
        rows=rows,
        loss=None,
        asked=PREFERENCE_ASKED if rows == PREFERENCE_ROWS else PROMPT_ASKED,
        make=make,
        features=lambda ds: _answer_features(
            ds, columns, each or (lambda d: d.Value("string")), images
        ),
    )


def _prompts(name: str, conversational: bool, images: bool, make: Any) -> RowShape:
    """Prompts alone, for a trainer that answers them itself; the columns its rewards read
    join these features as the split has them (`resolve.data`)."""
    each = _part_features if images else _message_features if conversational else None
    return RowShape(
        name,
        columns=("prompt",),
        conversational=conversational,
        images=images,
        prompt_completion=False,
        rows=PROMPT_ROWS,
        loss=None,
        asked=PROMPT_ONLY_ASKED,
        make=make,
        features=lambda ds: ds.Features(
            {
                **({"images": _images(ds)} if images else {}),
                "prompt": each(ds) if each else ds.Value("string"),
            }
        ),
    )


UNPAIRED_COLUMNS = ("prompt", "completion", "label")
SHAPES: dict[str, RowShape] = {
    shape.name: shape
    for shape in (
        _conversation(
            MESSAGES,
            images=False,
            make=messages_row,
            features=lambda ds: ds.Features({"messages": _message_features(ds)}),
        ),
        _pair(PROMPT_COMPLETION, False, False, prompt_completion_row, _text_features),
        _pair(
            CHAT_PROMPT_COMPLETION,
            conversational=True,
            images=False,
            make=chat_prompt_completion_row,
            features=lambda ds: ds.Features(
                {"prompt": _message_features(ds), "completion": _message_features(ds)}
            ),
        ),
        _conversation(
            VLM,
            images=True,
            make=vlm_row,
            features=lambda ds: ds.Features(
                {"images": _images(ds), "messages": _part_features(ds)}
            ),
        ),
        _pair(
            VLM_PROMPT_COMPLETION,
            conversational=True,
            images=True,
            make=vlm_prompt_completion_row,
            features=lambda ds: ds.Features(
                {
                    "images": _images(ds),
                    "prompt": _part_features(ds),
                    "completion": _part_features(ds),
                }
            ),
        ),
        _judged(PREFERENCE_ROWS, PREFERENCE, False, False, preference_row),
        _judged(PREFERENCE_ROWS, CHAT_PREFERENCE, True, False, chat_preference_row),
        _judged(PREFERENCE_ROWS, VLM_PREFERENCE, True, True, vlm_preference_row),
        _judged(UNPAIRED_ROWS, UNPAIRED, False, False, unpaired_row),
        _judged(UNPAIRED_ROWS, CHAT_UNPAIRED, True, False, chat_unpaired_row),
        _judged(UNPAIRED_ROWS, VLM_UNPAIRED, True, True, vlm_unpaired_row),
        RowShape(
            LANGUAGE_MODELING,
            columns=("text",),
            conversational=False,
            images=False,
            prompt_completion=False,
            rows=INSTRUCTION_ROWS,  # SFT's: TRL's language modeling
            loss=WHOLE_TEXT,
            asked=None,
            make=text_row,
            features=lambda ds: ds.Features({"text": ds.Value("string")}),
        ),
        RowShape(
            TOOL_MESSAGES,
            columns=("messages", "tools"),
            conversational=True,
            images=False,
            prompt_completion=False,
            rows=INSTRUCTION_ROWS,
            loss=ASSISTANT_ONLY,
            asked=CONVERSATION_ASKED,
            make=tool_messages_row,
            # Each message as it was written (tool calls' arguments differ in keys row to
            # row); the schemas as JSON text, which TRL decodes.
            features=lambda ds: ds.Features(
                {"messages": ds.List(ds.Json()), "tools": ds.Value("string")}
            ),
            tools=True,
        ),
        _prompts(PROMPTS, conversational=False, images=False, make=prompt_row),
        _prompts(CHAT_PROMPTS, conversational=True, images=False, make=chat_prompt_row),
        _prompts(VLM_PROMPTS, conversational=True, images=True, make=vlm_prompt_row),
    )
}
CONVERSATIONS = Shapes(SHAPES[MESSAGES], SHAPES[MESSAGES], SHAPES[VLM])
PAIRS = Shapes(
    SHAPES[PROMPT_COMPLETION], SHAPES[CHAT_PROMPT_COMPLETION], SHAPES[VLM_PROMPT_COMPLETION]
)
PREFERENCES = Shapes(SHAPES[PREFERENCE], SHAPES[CHAT_PREFERENCE], SHAPES[VLM_PREFERENCE])
UNPAIRED_SHAPES = Shapes(SHAPES[UNPAIRED], SHAPES[CHAT_UNPAIRED], SHAPES[VLM_UNPAIRED])
# Shapes with one form: rows that never go through the chat template (plain text), or always
# do (tool calls); `images` is the same shape, as formats with no image form refuse them.
TEXTS = Shapes(SHAPES[LANGUAGE_MODELING], SHAPES[LANGUAGE_MODELING], SHAPES[LANGUAGE_MODELING])
TOOL_CONVERSATIONS = Shapes(SHAPES[TOOL_MESSAGES], SHAPES[TOOL_MESSAGES], SHAPES[TOOL_MESSAGES])
PROMPT_SHAPES = Shapes(SHAPES[PROMPTS], SHAPES[CHAT_PROMPTS], SHAPES[VLM_PROMPTS])
SHAPE_SETS = (
    CONVERSATIONS,
    PAIRS,
    PREFERENCES,
    UNPAIRED_SHAPES,
    TEXTS,
    TOOL_CONVERSATIONS,
    PROMPT_SHAPES,
)
OUTPUT_FORMATS = tuple(SHAPES)


def row_shape(row: Mapping[str, Any]) -> RowShape:
    """The shape of a TRL row whose format was not recorded (a probe's): of the shapes that
    hold it, the one that reads the most of its columns (`messages` and `tools`: tool calls)."""
    held = [shape for shape in SHAPES.values() if shape.holds(row)]
    if not held:
        raise ValueError(f"not a TRL row of any shape: columns {', '.join(row)}")
    return max(held, key=lambda shape: len(shape.columns))


def asks_question(row: Mapping[str, Any]) -> bool:
    """Whether a TRL row asks a question with an answer to expect (not plain text)."""
    return row_shape(row).asked is not None


# Every column a TRL row of some shape has, `images` last: what a probe and a held-out loss keep.
TRL_COLUMNS = (*dict.fromkeys(c for shape in SHAPES.values() for c in shape.columns), "images")
