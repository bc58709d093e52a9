"""The data format registry: every format users write rows in (`REGISTRY`, by `data.format`)
and every shape of rows TRL's trainers take (`SHAPES`), each declared once, as data.

A `DataFormat` says how it is detected (the columns that state it, what a survey of a split
must find), how its rows become messages, and which `RowShape` its rows become: as text,
through the chat template, with images. A `RowShape` says how a row is made, whether it carries
images, whether it is prompt/completion or a preference pair, the loss flag it calls for
(`plan.trainer_settings`; none for preference pairs), how evaluation and `compare` ask it and
what they expect, and its Arrow features.

Input formats (`data.format`; `auto` detects one from the columns):

- ``messages``: a list of ``{role, content}`` messages (content text, or image/text parts)
- ``prompt_completion``: a ``prompt`` and a ``completion`` text
- ``alpaca``: ``instruction``, optional ``input``, ``output``
- ``sharegpt``: a list of ``{from, value}`` messages (``conversations``), converted with TRL's
  ``maybe_convert_to_chatml``; ShareGPT's ``human`` / ``gpt`` roles become ``user`` / ``assistant``
- ``preference``: a ``prompt``, a ``chosen`` and a ``rejected`` answer (DPO, ORPO): text, or
  conversations (``prompt`` messages ending with a user turn, each answer a string, one assistant
  message or a list of one); without a ``prompt`` column, ``chosen`` and ``rejected`` are full
  conversations sharing the prompt turns (TRL's implicit prompt, ``trl.data_utils.extract_prompt``)
- ``vlm``: ``messages`` with images (kept for configs that name it)

Any of them takes an ``images`` column (paths relative to the data file, or image bytes) on a
vision-language stage. Row shapes (`OUTPUT_FORMATS`, what `DataSplits.format` reports):

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

A part is ``{"type": "image", "text": None}`` or ``{"type": "text", "text": str}``.

A new format is one `DataFormat` in `REGISTRY` (its converter in `converters`, beside this
module); a new shape of rows one `RowShape` in `SHAPES` (its `make` in `converters`). Nothing
heavy is imported here (the pure `plan` reads the registry): ``datasets`` and ``trl`` only
inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.resolve.converters import (
    Row,
    alpaca_messages,
    chat_prompt_completion_row,
    chatml_messages,
    messages_row,
    prompt_completion_row,
    sharegpt_messages,
    vlm_prompt_completion_row,
    vlm_row,
)
from recipe_engine.resolve.preference_rows import (
    chat_preference_row,
    preference_row,
    vlm_preference_row,
)

MESSAGES, PROMPT_COMPLETION = "messages", "prompt_completion"
CHAT_PROMPT_COMPLETION = "chat_prompt_completion"
VLM, VLM_PROMPT_COMPLETION = "vlm", "vlm_prompt_completion"
PREFERENCE, CHAT_PREFERENCE = "preference", "chat_preference"
VLM_PREFERENCE = "vlm_preference"
CANONICAL_COLUMNS = (
    "messages",
    "conversations",
    "prompt",
    "completion",
    "instruction",
    "input",
    "output",
    "images",
    "chosen",
    "rejected",
)
ROLES = ("system", "user", "assistant")
# TRL's loss flags, one per kind of rows (`Loss`).
LOSS_FLAGS = ("assistant_only_loss", "completion_only_loss")


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Loss:
    """The loss flag rows call for: on the completion only (TRL masks the prompt, always
    possible), or on the assistant's turns only, where the chat template can mark them."""

    flag: str  # one of LOSS_FLAGS
    needs_markers: bool  # only where the chat template marks the turns (MARKED / PATCHED)


COMPLETION_ONLY = Loss("completion_only_loss", needs_markers=False)
ASSISTANT_ONLY = Loss("assistant_only_loss", needs_markers=True)


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


@dataclass(frozen=True)
class RowShape:
    """A shape of rows TRL's trainers take (`DataSplits.format`) and what follows from it."""

    name: str
    columns: tuple[str, ...]  # what TRL reads besides `images`
    conversational: bool  # the columns hold messages (TRL applies the chat template)
    images: bool  # carries images: a vision-language stage only
    prompt_completion: bool
    preference: bool  # prompt / chosen / rejected: for preference trainers (DPO, ORPO)
    loss: Loss | None  # None: a preference pair (SFT's loss flags do not apply)
    asked: Asking
    make: Callable[[Row], dict[str, Any]]  # one record -> one TRL row
    features: Callable[[Any], Any]  # the `datasets` module -> the features of such rows

    def holds(self, row: Mapping[str, Any]) -> bool:
        """Whether a TRL row (one whose shape was not recorded: a probe's) is of this shape."""
        if not all(column in row for column in self.columns):
            return False
        if ("chosen" in row) != self.preference:  # a pair is not a prompt and a completion
            return False
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


@dataclass(frozen=True)
class DataFormat:
    """A format users write rows in (`data.format`)."""

    name: str
    columns: tuple[str, ...]  # the canonical columns that state it (a mapping of one names it)
    needs: tuple[tuple[str, ...], ...]  # detection: a present column of each group
    expected: str  # how the refusal of an undetectable split describes it
    shapes: Shapes
    # Its rows as role/content messages (`row`, whether contents become parts) and the name
    # errors give them; None: a prompt and a completion, read by the shape's `make`.
    messages: Callable[[Row, bool], tuple[list[Any], str]] | None = None
    # Canonical columns that may hold role/content messages: where the survey finds them in
    # one, the rows are conversations (the chat shape, whatever data.chat_template says), and
    # image parts in one make image rows.
    conversable: tuple[str, ...] = ()
    # A canonical column rows may leave out: then it is what the other columns share (TRL's
    # implicit prompt: without `prompt`, the turns `chosen` and `rejected` begin with).
    implicit: str | None = None
    # Reads one conversation column: the mapped one, `messages` or `conversations`.
    conversation: bool = False
    # Detection: the keys of the messages in that column (None: not read) fit the format.
    message_keys: Callable[[frozenset[str] | None], bool] = lambda keys: True
    images: bool = False  # its rows always carry images
    detected: bool = True  # `auto` can find it


# --------------------------------------------------------------------------- row shapes


def _text_features(ds: Any) -> Any:
    return ds.Features({"prompt": ds.Value("string"), "completion": ds.Value("string")})


def _message_features(ds: Any) -> Any:
    return ds.List({"role": ds.Value("string"), "content": ds.Value("string")})


def _part_features(ds: Any) -> Any:
    text = ds.Value("string")
    return ds.List({"role": text, "content": ds.List({"type": text, "text": text})})


def _images(ds: Any) -> Any:
    return ds.List(ds.Image(mode="RGB"))  # decoded to RGB PIL images on access


def _conversation(name: str, images: bool, make: Any, features: Any) -> RowShape:
    return RowShape(
        name,
        columns=("messages",),
        conversational=True,
        images=images,
        prompt_completion=False,
        preference=False,
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
        preference=False,
        loss=COMPLETION_ONLY,
        asked=PROMPT_ASKED,
        make=make,
        features=features,
    )


def _preference(
    name: str, conversational: bool, images: bool, make: Any, features: Any
) -> RowShape:
    return RowShape(
        name,
        columns=("prompt", "chosen", "rejected"),
        conversational=conversational,
        images=images,
        prompt_completion=False,
        preference=True,
        loss=None,
        asked=PREFERENCE_ASKED,
        make=make,
        features=features,
    )


def _pair_features(ds: Any, each: Any, images: bool) -> Any:
    """prompt / chosen / rejected, each of `each(ds)`, after the images when there are any."""
    columns = {"images": _images(ds)} if images else {}
    return ds.Features({**columns, **{c: each(ds) for c in ("prompt", "chosen", "rejected")}})


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
        _preference(
            PREFERENCE,
            conversational=False,
            images=False,
            make=preference_row,
            features=lambda ds: _pair_features(ds, lambda d: d.Value("string"), images=False),
        ),
        _preference(
            CHAT_PREFERENCE,
            conversational=True,
            images=False,
            make=chat_preference_row,
            features=lambda ds: _pair_features(ds, _message_features, images=False),
        ),
        _preference(
            VLM_PREFERENCE,
            conversational=True,
            images=True,
            make=vlm_preference_row,
            features=lambda ds: _pair_features(ds, _part_features, images=True),
        ),
    )
}
CONVERSATIONS = Shapes(SHAPES[MESSAGES], SHAPES[MESSAGES], SHAPES[VLM])
PAIRS = Shapes(
    SHAPES[PROMPT_COMPLETION], SHAPES[CHAT_PROMPT_COMPLETION], SHAPES[VLM_PROMPT_COMPLETION]
)
PREFERENCES = Shapes(SHAPES[PREFERENCE], SHAPES[CHAT_PREFERENCE], SHAPES[VLM_PREFERENCE])


# --------------------------------------------------------------------------- input formats


def looks_sharegpt(keys: frozenset[str] | None) -> bool:
    return bool(keys) and {"from", "value"} <= keys and not {"role", "content"} <= keys


_CONVERSATION_COLUMNS = ("messages", "conversations")

REGISTRY: dict[str, DataFormat] = {
    given.name: given
    for given in (
        DataFormat(
            MESSAGES,
            _CONVERSATION_COLUMNS,
            (_CONVERSATION_COLUMNS,),
            "`messages` (role/content messages)",
            CONVERSATIONS,
            messages=chatml_messages,
            conversation=True,
            message_keys=lambda keys: not looks_sharegpt(keys),
        ),
        DataFormat(
            PROMPT_COMPLETION,
            ("prompt", "completion"),
            (("prompt",), ("completion",)),
            "`prompt`+`completion`",
            PAIRS,
        ),
        DataFormat(
            "alpaca",
            ("instruction", "input", "output"),
            (("instruction",), ("output",)),
            "`instruction`+`output` (Alpaca)",
            CONVERSATIONS,
            messages=alpaca_messages,
        ),
        DataFormat(
            PREFERENCE,
            ("prompt", "chosen", "rejected"),
            (("chosen",), ("rejected",)),
            "`prompt`+`chosen`+`rejected` (preference pairs)",
            PREFERENCES,
            conversable=("prompt", "chosen", "rejected"),
            implicit="prompt",
        ),
        DataFormat(
            "sharegpt",
            _CONVERSATION_COLUMNS,
            (_CONVERSATION_COLUMNS,),
            "`conversations` (ShareGPT from/value messages)",
            CONVERSATIONS,
            messages=sharegpt_messages,
            conversation=True,
            message_keys=looks_sharegpt,
        ),
        DataFormat(
            VLM,
            _CONVERSATION_COLUMNS,
            (_CONVERSATION_COLUMNS,),
            "",
            CONVERSATIONS,
            messages=chatml_messages,
            conversation=True,
            images=True,
            detected=False,
        ),
    )
}
INPUT_FORMATS = tuple(REGISTRY)
OUTPUT_FORMATS = tuple(SHAPES)


# --------------------------------------------------------------------------- queries


def has_images(output_format: str) -> bool:
    return SHAPES[output_format].images


def is_prompt_completion(output_format: str) -> bool:
    return SHAPES[output_format].prompt_completion


def is_text_prompt_completion(output_format: str) -> bool:
    """Plain prompt/completion text: rows a chat template may wrap (`data.chat_template`)."""
    shape = SHAPES[output_format]
    return shape.prompt_completion and not shape.images


def is_plain_text(output_format: str) -> bool:
    """Rows of plain text as written (prompt/completion, or preference pairs of strings): what
    `data.chat_template` decides on, through the chat template or as they are."""
    shape = SHAPES[output_format]
    return not shape.conversational and not shape.images


def written_as(output_format: str) -> str:
    """The plain-text shape whose rows became `output_format` through the chat template
    (`chat_preference` -> `preference`), or `output_format` itself: what `plan` names as the
    rows' own format beside how they reach the model."""
    for shapes in (PAIRS, PREFERENCES):
        if output_format == shapes.chat.name:
            return shapes.text.name
    return output_format


def is_preference(output_format: str) -> bool:
    """Preference pairs (prompt / chosen / rejected): rows for DPO and ORPO, not SFT."""
    return SHAPES[output_format].preference


def features(output_format: str) -> Any:
    """The Arrow features of rows in `output_format`."""
    import datasets

    return SHAPES[output_format].features(datasets)


def row_shape(row: Mapping[str, Any]) -> RowShape:
    """The shape of a TRL row whose format was not recorded (a probe's)."""
    for shape in SHAPES.values():
        if shape.holds(row):
            return shape
    raise ValueError(f"not a TRL row of any shape: columns {', '.join(row)}")
