"""Hypothesis strategies for what users type and bring: overrides over the engine's schema and
the libraries' field tables, data files, model folders.

Keys come from the real tables (the engine's structured configs, SFTConfig / LoraConfig /
BitsAndBytesConfig fields as the engine reads them), so a new key is fuzzed the day it exists.
Values are mutated across types, ranges, unicode, nulls, lists and Hydra's own syntax.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from functools import cache

from hypothesis import strategies as st

from recipe_engine.config import schema
from recipe_engine.config.library_keys import library_fields

RECIPES = ("text-lora", "r1-llm-only", "r3-two-stage")
STAGES = ("llm", "vision", "joint", "lmm")  # `lmm`: a stage no recipe has
SECTIONS = {"train": "SFTConfig", "lora": "LoraConfig", "quantization": "BitsAndBytesConfig"}
# Keys whose values point the engine elsewhere on this machine: left to their own fuzzers.
NOT_FUZZED = ("output_root", "hardware", "hydra")


@cache
def schema_keys() -> tuple[str, ...]:
    """Every dotted key of the engine's config, the stage's as `stage.<name>.<key>`."""
    keys = [k for k in _dotted(schema.EngineConfig, "") if not k.startswith(NOT_FUZZED)]
    stage = [f"stage.{{stage}}.{k}" for k in _dotted(schema.StageConfig, "")]
    return tuple(sorted(set(keys + stage)))


def _dotted(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    keys = []
    for item in dataclasses.fields(cls):
        kind = hints[item.name]
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            keys += _dotted(kind, f"{prefix}{item.name}.")
        elif item.name != "stage":
            keys.append(f"{prefix}{item.name}")
    return keys


@cache
def library_keys() -> tuple[str, ...]:
    return tuple(
        f"stage.{{stage}}.{section}.{name}"
        for section, cls in SECTIONS.items()
        for name in library_fields(cls)
    )


@cache
def choices() -> dict[str, tuple[str, ...]]:
    """The values a library field takes, by its name (SFTConfig's optim, lr_scheduler_type...)."""
    return {
        name: tuple(map(str, field.choices))
        for cls in SECTIONS.values()
        for name, field in library_fields(cls).items()
        if field.choices
    }


HYDRA_SYNTAX = st.sampled_from(
    [
        "null", "???", "[", "]", "[1,2", "{a: 1}", "'a b", '"', "${oc.env:HOME}", "${now:%Y}",
        "${undefined}", "a,b", "=", "==1", "~", "+", "\\", "[[]]", "{}", "[]", "''", "1e400",
        "-0", "nan", "inf", "0x10", "1_000", "true", "yes", "on", "None",
    ]
)  # fmt: skip
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=0, max_size=12)
SCALARS = st.one_of(
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.just("null"),
    TEXT,
    HYDRA_SYNTAX,
)


def _render(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_render(v) for v in value) + "]"
    return str(value)


VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3)).map(_render)
# Values a user would plausibly type, so that some examples plan (exit 0) and get further.
PLAUSIBLE = st.sampled_from(
    ["1", "2", "0", "8", "0.5", "1e-4", "true", "false", "null", "[]", "llm", "cpu", "auto"]
)


def value_for(key: str) -> st.SearchStrategy[str]:
    name = key.rsplit(".", 1)[-1]
    known = choices().get(name)
    plausible = st.one_of(PLAUSIBLE, st.sampled_from(known)) if known else PLAUSIBLE
    return st.one_of(plausible, VALUES)


@st.composite
def overrides(draw: st.DrawFn) -> list[str]:
    """A recipe and up to 2 overrides: schema and library keys (sometimes misspelt), each with
    a value of any type, as `key=`, `+key=`, `++key=` or `~key`."""
    stage = draw(st.sampled_from(STAGES))
    chosen = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(schema_keys() + library_keys())).format(stage=stage)
        if draw(st.integers(0, 9)) == 0:  # a typo: one character dropped
            cut = draw(st.integers(0, len(key) - 1))
            key = key[:cut] + key[cut + 1 :]
        prefix = draw(st.sampled_from(["", "", "", "+", "++", "~"]))
        chosen.append(f"~{key}" if prefix == "~" else f"{prefix}{key}={draw(value_for(key))}")
    return [f"recipe={draw(st.sampled_from(RECIPES))}", *chosen]


# --------------------------------------------------------------------------- data files

ROW_SHAPES = {
    "messages": lambda t: {
        "messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "4"}]
    },
    "prompt_completion": lambda t: {"prompt": t, "completion": "4"},
    "alpaca": lambda t: {"instruction": t, "input": "", "output": "4"},
    "sharegpt": lambda t: {
        "conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "4"}]
    },
    # Other tools' formats (tests/peer_files.py): pairs, feedback, parts in their spellings.
    "sharegpt_pairs": lambda t: {
        "conversations": [{"from": "human", "value": t}],
        "chosen": {"from": "gpt", "value": "It is 4."},
        "rejected": {"from": "gpt", "value": "5"},
    },
    "chosen_messages": lambda t: {
        "chosen_messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "4"}],
        "rejected_messages": [
            {"role": "user", "content": t},
            {"role": "assistant", "content": "5"},
        ],
    },
    "rejected_response": lambda t: {
        "messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "4"}],
        "rejected_response": "5",
    },
    "intel": lambda t: {"system": "Be brief.", "question": t, "chosen": "4", "rejected": "5"},
    "hh": lambda t: {
        "chosen": f"\n\nHuman: {t}\n\nAssistant: 4",
        "rejected": f"\n\nHuman: {t}\n\nAssistant: 5",
    },
    "unpaired": lambda t: {"prompt": t, "completion": "4", "label": True},
    "kto_messages": lambda t: {
        "messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "4"}],
        "label": False,
    },
    "value_parts": lambda t: {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": t}]},
            {"role": "assistant", "content": [{"type": "image_url", "value": "https://x/a.png"}]},
        ]
    },
}
ODD_VALUES = st.one_of(
    st.none(), st.integers(), st.floats(), TEXT, st.lists(TEXT, max_size=2), st.just({})
)


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, object]]:
    """Rows of one format, some of them broken: keys dropped, values of another type, extra
    columns, a row of another format."""
    shape = ROW_SHAPES[draw(st.sampled_from(sorted(ROW_SHAPES)))]
    made = [shape(draw(TEXT)) for _ in range(draw(st.integers(0, 6)))]
    for row in made:
        if draw(st.integers(0, 4)) == 0 and row:
            del row[draw(st.sampled_from(sorted(row)))]
        if draw(st.integers(0, 4)) == 0 and row:
            row[draw(st.sampled_from(sorted(row)))] = draw(ODD_VALUES)
        if draw(st.integers(0, 6)) == 0:
            row["images"] = draw(st.sampled_from([["missing.png"], ["broken.png"], "x", None]))
    if made and draw(st.booleans()):
        made.append(ROW_SHAPES[draw(st.sampled_from(sorted(ROW_SHAPES)))](draw(TEXT)))
    return made


def jsonl(made: list[dict[str, object]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in made)


def csv_text(made: list[dict[str, object]]) -> str:
    import csv
    import io

    columns = sorted({k for row in made for k in row})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in made:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()}
        )
    return buffer.getvalue()
