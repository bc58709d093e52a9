"""recipe_engine.resolve.formats: the data format registry. Every format and every row shape is
declared once, detection follows the declarations, a shape's loss flag is what the plan chooses,
and evaluation asks each shape as TRL trains it. No data is read here: surveys are written by
hand."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import recipe_engine
from recipe_engine.errors import RecipeError
from recipe_engine.plan.trainer_settings import choose_loss
from recipe_engine.resolve import formats
from recipe_engine.resolve.detection import detection_order, resolve_layout
from recipe_engine.resolve.formats import REGISTRY, input_formats
from recipe_engine.resolve.row_shapes import (
    ASSISTANT_ONLY,
    COMPLETION_ONLY,
    LOSS_FLAGS,
    OUTPUT_FORMATS,
    SHAPES,
    row_shape,
)
from recipe_engine.resolve.survey import Survey
from recipe_engine.resolve.templates import MARKED, UNMARKED

PACKAGE = Path(recipe_engine.__file__).parent


def seen(*present: str, keys: dict[str, set[str]] | None = None, images: tuple = ()) -> Survey:
    """A split's survey as `detection.survey` would read it (`images`: the conversation
    columns where a content part is an image)."""
    message_keys = {column: frozenset(k) for column, k in (keys or {}).items()}
    texts = tuple(c for c in present if c not in message_keys)
    return Survey("data file x.jsonl", present, present, texts, message_keys, frozenset(images))


# --------------------------------------------------------------------------- declared once


def test_every_format_and_shape_is_declared_once_under_its_own_name() -> None:
    assert input_formats() == (
        "messages",
        "prompt_completion",
        "alpaca",
        "preference",
        "unpaired",
        "sharegpt",
        "firefly",
        "vlm",
        "tools",
        "language_modeling",
        "prompts",
        # resolve/peer_formats, one module each, in module order
        "qwen_vl",
        "swift_pretrain",
    )
    assert OUTPUT_FORMATS == (
        "messages",
        "prompt_completion",
        "chat_prompt_completion",
        "vlm",
        "vlm_prompt_completion",
        "preference",
        "chat_preference",
        "vlm_preference",
        "unpaired",
        "chat_unpaired",
        "vlm_unpaired",
        "language_modeling",
        "tool_messages",
        "prompts",
        "chat_prompts",
        "vlm_prompts",
    )
    assert all(name == given.name for name, given in REGISTRY.items())
    assert all(name == shape.name for name, shape in SHAPES.items())
    reached = {
        shape.name
        for given in REGISTRY.values()
        for shape in (given.shapes.text, given.shapes.chat, given.shapes.images)
    }
    assert reached == set(SHAPES)  # every shape is one some format's rows become
    for given in REGISTRY.values():
        # A format has a form with images, or one form only (its layout refuses images).
        one_form = given.shapes.images is given.shapes.text is given.shapes.chat
        assert (given.shapes.images.images or one_form) and not given.shapes.text.images
        assert set(given.columns) <= set(formats.canonical_columns())
        text = given.shapes.text
        reads = given.messages is not None or text.prompt_completion or text.prompts
        assert reads or given.judged or one_form
        judged = text.rows in ("preference", "unpaired")
        assert given.judged == judged == bool(given.answers)


def test_no_module_matches_a_format_by_its_name_outside_the_registry() -> None:
    names = "|".join(n for n in {*input_formats(), *OUTPUT_FORMATS, "conversation"} if n != "vlm")
    compared = re.compile(rf"""[=!]= ?["']({names})["']|["']({names}|prompt)["'] (not )?in """)
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("formats.py", "row_shapes.py", "converters.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if compared.search(line)
    ]
    assert found == []


def test_the_registry_imports_nothing_heavy() -> None:
    code = (
        "import sys, recipe_engine.resolve.formats, recipe_engine.resolve.detection\n"
        "print(sorted(m for m in ('torch', 'datasets', 'trl', 'PIL') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("survey", "mapping", "expected"),
    [
        (seen("messages", keys={"messages": {"role", "content"}}), {}, "messages"),
        (seen("conversations", keys={"conversations": {"from", "value"}}), {}, "sharegpt"),
        (seen("chat", keys={"chat": {"from", "value"}}), {"messages": "chat"}, "sharegpt"),
        (seen("prompt", "completion"), {}, "prompt_completion"),
        (seen("instruction", "input", "output"), {}, "alpaca"),
        (seen("q", "a"), {"prompt": "q", "completion": "a"}, "prompt_completion"),
        # A conversation column states the format before other columns do.
        (seen("messages", "prompt", "completion"), {}, "messages"),
        # Explicitly mapped columns state it first.
        (seen("messages", "q"), {"prompt": "q", "completion": "a"}, "prompt_completion"),
    ],
)
def test_auto_detects_the_format_the_columns_declare(survey, mapping, expected) -> None:
    assert resolve_layout("auto", survey, mapping).fmt == expected


def test_the_shape_follows_the_format_images_and_the_chat_template() -> None:
    pairs = seen("prompt", "completion")
    assert resolve_layout("auto", pairs, {}).output == "prompt_completion"
    with_images = seen("prompt", "completion", "images")
    assert resolve_layout("auto", with_images, {}).output == "vlm_prompt_completion"
    chat = resolve_layout("prompt_completion", pairs, {})
    assert type(chat)(chat.fmt, chat.columns, False, chat=True).output == "chat_prompt_completion"
    vlm = resolve_layout("vlm", seen("messages"), {})
    assert (vlm.fmt, vlm.images, vlm.output, vlm.describe()) == ("vlm", True, "vlm", "vlm")
    parts = seen("messages", keys={"messages": {"role", "content"}}, images=("messages",))
    assert resolve_layout("auto", parts, {}).describe() == "messages with images"


def test_an_undetectable_split_lists_what_each_format_expects() -> None:
    assert "vlm" not in [given.name for given in detection_order()]  # named, never detected
    with pytest.raises(RecipeError) as info:
        resolve_layout("auto", seen("body"), {})
    assert info.value.key == "data.format"
    assert (
        "Expected `prompt`+`chosen`+`rejected` (preference pairs), `prompt`+`completion`+"
        "`label` (unpaired feedback, KTO), `<img>` tags in `conversations` or `query`+"
        "`response` text (Qwen-VL), `messages`+`tools` (tool calls), `messages` "
        "(role/content messages), `conversations` "
        "(ShareGPT from/value messages), `prompt`+`completion`, `instruction`+`output` "
        "(Alpaca), `conversation` ({human, assistant} exchanges, Firefly), `text` "
        "(language modeling), or `response` alone (ms-swift's pretraining text); an `images` "
        "column adds images." in str(info.value)
    )
    assert (
        "data.format=<messages|prompt_completion|alpaca|preference|unpaired|sharegpt|firefly|vlm"
        "|tools|language_modeling|prompts|qwen_vl|swift_pretrain>" in str(info.value)
    )


# --------------------------------------------------------------------------- loss, evaluation


def test_each_shape_declares_the_loss_flag_the_plan_chooses() -> None:
    pairs = [shape.name for shape in SHAPES.values() if shape.preference]
    assert pairs == ["preference", "chat_preference", "vlm_preference"]
    judged = [shape.name for shape in SHAPES.values() if shape.unpaired]
    assert judged == ["unpaired", "chat_unpaired", "vlm_unpaired"]
    assert all(SHAPES[name].loss is None for name in pairs + judged)  # SFT's flags do not apply
    flagged = [s for s in SHAPES.values() if s.rows == "instruction" and s.asked is not None]
    for shape in flagged:
        assert shape.loss == (COMPLETION_ONLY if shape.prompt_completion else ASSISTANT_ONLY)
        assert shape.loss.flag in LOSS_FLAGS
        assert choose_loss("s", {}, shape.name, MARKED).flags == {shape.loss.flag: True}
        unmarked = choose_loss("s", {}, shape.name, UNMARKED).flags
        assert unmarked == {shape.loss.flag: not shape.loss.needs_markers}
        other = next(flag for flag in LOSS_FLAGS if flag != shape.loss.flag)
        with pytest.raises(RecipeError) as info:
            choose_loss("s", {other: True}, shape.name, MARKED)
        assert info.value.key == f"stage.s.train.{other}"


USER = {"role": "user", "content": "2+2?"}
ANSWER = {"role": "assistant", "content": "4"}
PARTS = [{"type": "image", "text": None}, {"type": "text", "text": "colour?"}]
ROWS = {
    "messages": {"messages": [USER, ANSWER], "images": []},
    "prompt_completion": {"prompt": "2+2?", "completion": "4", "images": []},
    "chat_prompt_completion": {"prompt": [USER], "completion": [ANSWER]},
    "vlm": {"messages": [{"role": "user", "content": PARTS}, ANSWER], "images": ["a.png"]},
    "vlm_prompt_completion": {
        "prompt": [{"role": "user", "content": PARTS}],
        "completion": [ANSWER],
        "images": ["a.png"],
    },
    "preference": {"prompt": "2+2?", "chosen": "4", "rejected": "5", "images": []},
    "chat_preference": {"prompt": [USER], "chosen": [ANSWER], "rejected": [ANSWER]},
    "vlm_preference": {
        "prompt": [{"role": "user", "content": PARTS}],
        "chosen": [ANSWER],
        "rejected": [{"role": "assistant", "content": "5"}],
        "images": ["a.png"],
    },
    "unpaired": {"prompt": "2+2?", "completion": "4", "label": True, "images": []},
    "chat_unpaired": {"prompt": [USER], "completion": [ANSWER], "label": False},
    "vlm_unpaired": {
        "prompt": [{"role": "user", "content": PARTS}],
        "completion": [ANSWER],
        "label": True,
        "images": ["a.png"],
    },
    "tool_messages": {"messages": [USER, ANSWER], "tools": "[]", "images": []},
    # Prompts for an online trainer, with the reference answer a reward reads.
    "prompts": {"prompt": "2+2?", "answer": "4"},
    "chat_prompts": {"prompt": [USER], "answer": "4"},
    "vlm_prompts": {"prompt": [{"role": "user", "content": PARTS}], "answer": 4, "images": ["a"]},
}


def test_a_row_tells_its_shape_and_how_it_is_asked() -> None:
    assert set(ROWS) | {"language_modeling"} == set(SHAPES)  # plain text asks nothing
    assert row_shape({"text": "2+2 is 4"}).asked is None
    for name, row in ROWS.items():
        shape = row_shape(row)
        assert shape.name == name
        question, answer = shape.asked.question(row), shape.asked.answer(row)
        assert isinstance(question, str) == (not shape.conversational)
        assert answer in ("4", [ANSWER])  # a prompt's answer as text, whatever its type
    with pytest.raises(ValueError):
        row_shape({"body": "no TRL columns"})
