"""The data format registry: every format users write rows in (`REGISTRY`, by `data.format`),
each declared once, as data: the columns that state it, what a survey of a split must find to
detect it, the names other tools give its columns, the kind of rows it holds (instruction rows,
preference pairs, unpaired feedback) and the row shapes TRL gets from it (`row_shapes`).

Input formats (`data.format`; `auto` detects one from the columns):

- ``messages``: a list of ``{role, content}`` messages (content text, or parts in any spelling:
  `parts`), optionally with a ``system`` column
- ``sharegpt``: a list of ``{from, value}`` messages (``conversations``), converted with TRL's
  ``maybe_convert_to_chatml``; ShareGPT's ``human`` / ``gpt`` roles become ``user`` / ``assistant``
- ``prompt_completion``: a ``prompt`` and a ``completion`` text (ms-swift's ``query`` /
  ``response``), optionally a ``system`` text
- ``alpaca``: ``instruction``, optional ``input``, ``output``, optional ``system`` and ``history``
- ``preference``: a prompt and a ``chosen`` and a ``rejected`` answer (DPO, ORPO). The prompt
  is a ``prompt`` column (text or messages), an ``instruction``, a conversation, or the turns
  whole ``chosen`` / ``rejected`` conversations share (`prompt_turns`); peers' names for the
  answers (``chosen_response``, ``chosen_messages``, ms-swift's ``rejected_response``) read as
  the answers
- ``unpaired``: a prompt, one ``completion`` and a boolean ``label`` (KTO; LLaMA-Factory's
  ``kto_tag``); the completion may be a conversation's last assistant turn
- ``firefly``: a ``conversation`` of ``{human, assistant}`` exchanges (Firefly's format),
  optionally with a ``system`` column
- ``tools``: ``messages`` that call functions (assistant turns with ``tool_calls``, ``tool``
  turns with the results) and a ``tools`` column of the functions' JSON schemas (TRL's tool
  calling: the chat template renders them)
- ``language_modeling``: one ``text`` column (TRL's language modeling: continued
  pretraining), detected only where no other format's column is there
- ``vlm``: ``messages`` with images (kept for configs that name it)
- ``prompts``: a ``prompt`` (text, or messages ending with a user turn) and any columns the
  stage's rewards read (an ``answer``; a ``completion`` reaches them as ``answer``): the rows
  of the online trainers (GRPO, RLOO). Never detected from columns (a prompt beside an answer
  is an instruction row to SFT): a stage whose trainer takes prompts reads its rows so

Beside them, the formats of `resolve/peer_formats` (each a module with one `FORMAT`, the shape a
plug-in's format takes): ms-swift's pretraining rows (``swift_pretrain``: a ``response`` alone,
read as language modeling) and Qwen-VL's rows that name their images with inline
``<img>PATH</img>`` tags (``qwen_vl``).

Any of them but ``tools``, ``language_modeling`` and ``swift_pretrain`` takes an ``images``
column (paths relative to the data file, or image bytes) on a vision-language stage, or images
named inside the content parts. A new format is one module of `peer_formats` with its `FORMAT`,
a `DataFormat` (`data_format`: the protocol, re-exported here), and its converter beside it: its
columns (`canonical_columns`, what `data.columns` maps), how `auto` detects it, how refusals
describe it and the docs' table row (`format_table`) are all in it; a new shape of rows one
`RowShape` in `row_shapes.SHAPES`. Nothing heavy is imported here (the pure `plan` reads the
registry): ``datasets`` and ``trl`` only inside the functions that need them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from recipe_engine.plugins import Registry
from recipe_engine.resolve.converters import (
    alpaca_messages,
    chatml_messages,
    firefly_messages,
    sharegpt_messages,
)
from recipe_engine.resolve.data_format import PROMPT_ALIASES, DataFormat
from recipe_engine.resolve.row_shapes import (
    CONVERSATIONS,
    LANGUAGE_MODELING,
    MESSAGES,
    PAIRS,
    PREFERENCE,
    PREFERENCES,
    PROMPT_COMPLETION,
    PROMPT_SHAPES,
    PROMPTS,
    SHAPE_SETS,
    SHAPES,
    TEXTS,
    TOOL_CONVERSATIONS,
    UNPAIRED,
    UNPAIRED_SHAPES,
    VLM,
)
from recipe_engine.trainers import trainer_for, trainers_taking
from recipe_engine.trainers.kind import (
    PREFERENCE_ROWS,
    PROMPT_ROWS,
    ROW_KINDS,
    UNPAIRED_ROWS,
)

# The columns every format may read beside its own (a format's own columns join them:
# `CANONICAL_COLUMNS`, the names `data.columns` maps).
_COMMON_COLUMNS = (
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
    "label",
    "system",
    "history",
    "conversation",
)
ROLES = ("system", "user", "assistant")
# Judged rows without an `instruction` also take Axolotl's `chatml.icr` `input` as the prompt.
JUDGED_PROMPT_ALIASES = (*PROMPT_ALIASES, "input")


def looks_sharegpt(keys: frozenset[str] | None) -> bool:
    return bool(keys) and {"from", "value"} <= keys and not {"role", "content"} <= keys


_CONVERSATION_COLUMNS = ("messages", "conversations")
_JUDGED_CONVERSABLE = ("prompt", "chosen", "rejected", "completion", *_CONVERSATION_COLUMNS)

OWN: dict[str, DataFormat] = {
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
            doc_columns="`messages`: `[{role, content}]`, optional `system`",
            doc_trl="`messages`",
        ),
        DataFormat(
            PROMPT_COMPLETION,
            ("prompt", "completion"),
            (("prompt",), ("completion",)),
            "`prompt`+`completion`",
            PAIRS,
            aliases={"prompt": PROMPT_ALIASES, "completion": ("response", "answer")},
            doc_columns="`prompt`, `completion` (text; also `query` / `question` and `response` "
            "/ `answer`), optional `system`, `history`",
            doc_trl="`prompt` / `completion`: one user and one assistant turn where the model "
            "has a chat template (`data.chat_template`)",
        ),
        DataFormat(
            "alpaca",
            ("instruction", "input", "output"),
            (("instruction",), ("output",)),
            "`instruction`+`output` (Alpaca)",
            CONVERSATIONS,
            messages=alpaca_messages,
            doc_columns="`instruction`, optional `input`, `output`, optional `system`, `history` "
            "(`[[question, answer], ...]`)",
            doc_trl="`messages`",
        ),
        DataFormat(
            PREFERENCE,
            ("prompt", "chosen", "rejected"),
            (("rejected",), ("chosen", *_CONVERSATION_COLUMNS)),
            "`prompt`+`chosen`+`rejected` (preference pairs)",
            PREFERENCES,
            conversable=_JUDGED_CONVERSABLE,
            rows=PREFERENCE_ROWS,
            answers=("chosen", "rejected"),
            aliases={
                "chosen": ("chosen_messages", "chosen_response"),
                "rejected": ("rejected_messages", "rejected_response"),
            },
            doc_columns="a prompt, `chosen`, `rejected`: see [Preference rows](#preference-rows)",
            doc_trl="`prompt` / `chosen` / `rejected` (conversational through the chat template, "
            "as prompt/completion rows are): see [Preference training](preference.md)",
        ),
        DataFormat(
            UNPAIRED,
            ("prompt", "completion", "label"),
            (("label",), ("completion", *_CONVERSATION_COLUMNS)),
            "`prompt`+`completion`+`label` (unpaired feedback, "
            f"{trainer_for(UNPAIRED_ROWS).upper()})",
            UNPAIRED_SHAPES,
            conversable=_JUDGED_CONVERSABLE,
            rows=UNPAIRED_ROWS,
            answers=("completion",),
            aliases={"label": ("kto_tag",), "completion": ("output", "response", "answer")},
            doc_columns="a prompt, one `completion` (or a conversation's last assistant turn), a "
            "boolean `label` (LLaMA-Factory's `kto_tag`)",
            doc_trl="`prompt` / `completion` / `label`",
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
            doc_columns="`conversations` (or `messages`): `[{from, value}]`, roles "
            "`human`/`gpt`/`system`, optional `system`",
            doc_trl="`messages` (TRL's `maybe_convert_to_chatml`)",
        ),
        DataFormat(
            "firefly",
            ("conversation",),
            (("conversation",),),
            "`conversation` ({human, assistant} exchanges, Firefly)",
            CONVERSATIONS,
            messages=firefly_messages,
            doc_columns="`conversation`: `[{human, assistant}]`, one object per exchange, "
            "optional `system`",
            doc_trl="`messages`",
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
            doc_columns="`messages` with image parts",
            doc_trl="`images` + `messages`",
        ),
        DataFormat(
            "tools",
            ("tools",),
            (_CONVERSATION_COLUMNS, ("tools",)),
            "`messages`+`tools` (tool calls)",
            TOOL_CONVERSATIONS,
            conversation=True,
            message_keys=lambda keys: not looks_sharegpt(keys),
            doc_columns="`messages` whose assistant turns may have `tool_calls` (`[{type, "
            "function: {name, arguments}}]`) and `tool` turns the results, `tools`: the "
            "functions' JSON schemas, optional `system`",
            doc_trl="`messages` + `tools` (TRL hands `tools` to the chat template, which must "
            "render them: `plan` refuses one that does not)",
        ),
        DataFormat(
            LANGUAGE_MODELING,
            ("text",),
            (("text",),),
            "`text` (language modeling)",
            TEXTS,
            alone=True,
            doc_columns="`text` alone (continued pretraining; detected where no other format's "
            "column is there)",
            doc_trl="`text`: the loss covers the whole text, packing applies; evaluated by "
            "held-out loss only",
        ),
        DataFormat(
            PROMPTS,
            ("prompt",),
            (("prompt",),),
            "`prompt` (prompts for an online trainer)",
            PROMPT_SHAPES,
            conversable=("prompt",),
            detected=False,
            rows=PROMPT_ROWS,
            aliases={"prompt": PROMPT_ALIASES},
            doc_columns="`prompt` (text, or messages ending with a user turn; also `query` / "
            "`question`), optional `system`, `images`, and any other columns (`completion` as "
            "`answer`)",
            doc_trl="`prompt` and the other columns as written (TRL hands them on to the "
            "functions that score the answers): see [Online stages](online.md)",
        ),
    )
}


def _broken(given: Any) -> str | None:
    """What a format module's or a plug-in's format gets wrong of the protocol (None: none)."""
    if not isinstance(given, DataFormat):
        return f"is a {type(given).__name__}, not a DataFormat (recipe_engine.resolve.formats)"
    if given.rows not in ROW_KINDS:
        return f"holds rows `{given.rows}`, not one of {', '.join(ROW_KINDS)}"
    return None


def _modules() -> list[DataFormat]:
    """The formats the engine carries as modules of `resolve/peer_formats` (each a `FORMAT`:
    the shape a plug-in's takes), in module order."""
    from recipe_engine.resolve import peer_formats

    found = []
    for module in pkgutil.iter_modules(peer_formats.__path__):
        given = importlib.import_module(f"{peer_formats.__name__}.{module.name}").FORMAT
        problem = _broken(given)
        assert problem is None, f"resolve/peer_formats/{module.name}.py: {problem}"
        found.append(given)
    return found


OWN.update({given.name: given for given in _modules()})
# The engine's formats, then those of plug-ins (`plugins`: taken when first read).
REGISTRY: Mapping[str, DataFormat] = Registry("formats", OWN, _broken)


def format_taking(rows: str) -> str | None:
    """The format a stage reads when its trainer takes `rows` that `auto` never detects
    (prompts: a prompt beside an answer is an instruction row): the one format holding them."""
    holding = [given for given in REGISTRY.values() if given.rows == rows]
    if len(holding) == 1 and not holding[0].detected:
        return holding[0].name
    return None


def input_formats() -> tuple[str, ...]:
    """Every `data.format` (the engine's and its plug-ins')."""
    return tuple(REGISTRY)


def canonical_columns() -> tuple[str, ...]:
    """The columns `data.columns` maps: every format's, besides the common ones."""
    return tuple(
        dict.fromkeys((*_COMMON_COLUMNS, *(c for f in REGISTRY.values() for c in f.columns)))
    )


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
    """Rows of plain text as written that have a form through the chat template
    (prompt/completion, preference rows of strings): what `data.chat_template` decides on,
    through the chat template or as they are (language-modeling `text` has no such form)."""
    return any(output_format == s.text.name != s.chat.name for s in SHAPE_SETS)


def written_as(output_format: str) -> str:
    """The plain-text shape whose rows became `output_format` through the chat template
    (`chat_preference` -> `preference`), or `output_format` itself: what `plan` names as the
    rows' own format beside how they reach the model."""
    for shapes in SHAPE_SETS:
        if output_format == shapes.chat.name:
            return shapes.text.name
    return output_format


def rows_kind(output_format: str) -> str:
    """The kind of rows (`trainers`): instruction | preference | unpaired."""
    return SHAPES[output_format].rows


def is_preference(output_format: str) -> bool:
    """Preference pairs (prompt / chosen / rejected): rows for DPO and ORPO, not SFT."""
    return SHAPES[output_format].preference


def features(output_format: str) -> Any:
    """The Arrow features of rows in `output_format`."""
    import datasets

    return SHAPES[output_format].features(datasets)


def format_table() -> str:
    """The docs' table of formats (docs/data.md holds it as rendered: a test compares)."""
    lines = [
        "| `data.format` | columns (canonical names) | TRL gets | `trainer` |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{given.name}` | {given.doc_columns} | {given.doc_trl} | "
        f"{' / '.join(f'`{name}`' for name in trainers_taking(given.rows))} |"
        for given in REGISTRY.values()
    ]
    return "\n".join(lines) + "\n"
