"""`make bench-memory`'s configurations, without running them (milliseconds)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench_memory import CASES, case_arguments, long_feedback, long_pairs


def test_case_names_are_unique_and_preference_rows_name_their_trainer() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    pairs = [case for case in CASES if case.rows == "pairs"]
    assert {c.name for c in pairs} >= {
        "tiny-qwen2 dpo lora b8 s128",
        "tiny-qwen2 dpo full b8 s128",
        "smollm2 dpo lora b2 s128",
        "smollm2 dpo full b2 s128",
    }
    feedback = [case for case in CASES if case.rows == "feedback"]
    assert {c.name for c in feedback} == {
        "tiny-qwen2 kto lora b8 s128",
        "tiny-qwen2 kto full b8 s128",
        "smollm2 kto lora b2 s128",
        "smollm2 kto full b2 s128",
    }
    for case in pairs + feedback:
        trainer = case.name.split()[1]
        assert f"stage.llm.trainer={trainer}" in case.overrides
        assert ("stage.llm.lora=null" in case.overrides) == (" full " in case.name)


def test_long_pairs_outgrow_max_length_but_not_their_prompt(tmp_path: Path) -> None:
    """Every sequence is truncated to max_length; TRL drops a pair whose prompt alone fills it."""
    rows = [json.loads(line) for line in long_pairs(tmp_path).read_text().splitlines()]
    assert rows and all(set(row) == {"prompt", "chosen", "rejected"} for row in rows)
    assert all(len(row["prompt"].split()) < 16 for row in rows)
    assert all(min(len(row["chosen"].split()), len(row["rejected"].split())) > 512 for row in rows)


def test_long_feedback_outgrows_max_length_with_both_labels_in_every_batch(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in long_feedback(tmp_path).read_text().splitlines()]
    assert rows and all(set(row) == {"prompt", "completion", "label"} for row in rows)
    assert all(
        len(row["prompt"].split()) < 16 < 512 < len(row["completion"].split()) for row in rows
    )
    assert [row["label"] for row in rows[:4]] == [True, False, True, False]


def test_a_local_smollm2_folder_replaces_the_gguf_in_smollm2s_cases_only(tmp_path: Path) -> None:
    """Where only SmolLM2's shape reached a GPU machine (the GGUF is more than a call carries)."""
    data = {"chat": tmp_path / "chat.jsonl"}
    text = next(c for c in CASES if c.name == "smollm2 lora b2 s128")
    vision = next(c for c in CASES if c.name == "tiny-qwen2-vl vision-full b8")
    local = tmp_path / "smollm2"
    args = case_arguments(text, data, "cuda", tmp_path / "out", local)
    assert {"model=smollm2-135m", f"model.id={local}", "model.gguf_file=null"} <= set(args)
    assert f"model.id={local}" not in case_arguments(vision, data, "cuda", tmp_path, local)
    assert not any(a.startswith("model.id=") for a in case_arguments(text, data, "cpu", tmp_path))
