"""The formats of the tools users come from, read as their documentation writes them: every
file of `peer_files.PEER_FILES` is detected with no setting (`data.format=auto`, no column
mapping), becomes the TRL rows its trainer takes, and keeps what each row says: the question,
the answer (chosen, judged), the system prompt, the label, the images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from data_kit import load
from peer_files import PEER_FILES, SYSTEM

from recipe_engine.resolve.formats import rows_kind
from recipe_engine.trainers.kind import INSTRUCTION_ROWS, PREFERENCE_ROWS, UNPAIRED_ROWS

FIRST_QUESTION, FIRST_ANSWER = "What is 1 + 1?", "2"
ROWS_FOR = {"sft": INSTRUCTION_ROWS, "dpo": PREFERENCE_ROWS, "kto": UNPAIRED_ROWS}


def said(value: Any) -> str:
    """Every text in a TRL row's field: message contents and text parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(said(value[k]) for k in ("content", "text") if value.get(k) is not None)
    if isinstance(value, list):
        return " ".join(said(item) for item in value)
    return ""


@pytest.mark.parametrize("name", PEER_FILES)
def test_a_peer_file_becomes_the_rows_its_trainer_takes(name: str, tmp_path: Path) -> None:
    peer = PEER_FILES[name]
    splits = load(peer.write(tmp_path), kind=peer.kind, chat_template="true", eval_fraction=0.0)
    assert splits.format == peer.shape, splits.source_format
    assert rows_kind(splits.format) == ROWS_FOR[peer.trainer]
    row = splits.train.with_format(None)[0]
    asked = said(row.get("prompt", row.get("messages", row.get("text"))))
    if peer.kind == "vlm":
        assert row["images"] and "colour" in asked
        assert asked.count("image") == 0  # placeholders are parts, not text
        return
    assert FIRST_QUESTION in asked
    answer = said(
        row.get("chosen", row.get("completion", row.get("messages", [])[-1:] or row.get("text")))
    )
    assert FIRST_ANSWER in answer
    if "rejected" in row:
        assert said(row["rejected"]) not in ("", answer)
    if "label" in row:
        assert row["label"] is True  # the first row's answer is right
        assert set(splits.train["label"]) == {True, False}


@pytest.mark.parametrize(
    "name",
    [
        n
        for n, peer in PEER_FILES.items()
        if peer.kind == "causal_lm" and peer.shape != "language_modeling"
    ],
)
def test_a_system_prompt_beside_the_turns_is_the_first_message(name: str, tmp_path: Path) -> None:
    path = PEER_FILES[name].write(tmp_path)
    rows = load(path, chat_template="true", eval_fraction=0.0).train
    first = rows.with_format(None)[1]  # LLaMA-Factory's alpaca gives the second row one
    messages = first.get("prompt", first.get("messages"))
    has_system = SYSTEM in path.read_text()
    assert (messages[0]["role"] == "system" and messages[0]["content"] == SYSTEM) == has_system
