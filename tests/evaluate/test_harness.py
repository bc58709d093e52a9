"""`evaluate.harness`: the base and a trained stage of a short text run scored by EleutherAI's
lm-evaluation-harness itself (no mocks) on the shipped offline tasks, with the harness version
and each task's config hash recorded (tests/cli/test_compare_harness.py: the verb, refusals).

One text-lora run (tiny Qwen2, 2 steps) is shared by the module; the harness scores 4 documents
per task, so the whole file takes seconds.
"""

from __future__ import annotations

import csv
import json
import re
from importlib.metadata import version
from pathlib import Path

import lm_eval  # noqa: F401  (the eval extra, in dev: missing fails, never skips)
import pytest
from plans import short_text_run

from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.harness import (
    SHIPPED_DIR,
    HarnessSettings,
    check_tasks,
    score_harness,
    shipped_tasks,
    task_hash,
)

SHIPPED = ("recipe_arith", "recipe_arith_mc")


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    run_dir = short_text_run(tmp_path_factory.mktemp("harness"))
    return score_harness(run_dir, HarnessSettings(SHIPPED, limit=4), "compare")


def test_base_and_stage_scored_on_both_shipped_tasks(scored):
    result = scored.result
    assert result.version == version("lm_eval")
    assert [(s.model, s.task, s.metric) for s in result.scores] == [
        ("base", "recipe_arith", "exact_match,first_number"),
        ("base", "recipe_arith_mc", "acc,none"),
        ("llm", "recipe_arith", "exact_match,first_number"),
        ("llm", "recipe_arith_mc", "acc,none"),
    ]
    for score in result.scores:
        assert isinstance(score.value, float) and 0.0 <= score.value <= 1.0
        assert score.n == 4 and score.note == ""
        assert re.fullmatch(r"[0-9a-f]{64}", score.task_hash)
    # A task's hash names the task, not the model: the same for the base and the stage.
    hashes = {(s.task, s.task_hash) for s in result.scores}
    assert len(hashes) == 2
    assert result.chat_template == {"base": True, "llm": True}


def test_records_hold_every_score_with_version_and_full_hash(scored):
    assert scored.csv.name == "compare_harness.csv" and scored.json.name == "compare_harness.json"
    with scored.csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    assert {r["lm_eval_version"] for r in rows} == {version("lm_eval")}
    assert [r["task_hash"] for r in rows] == [s.task_hash for s in scored.result.scores]
    saved = json.loads(scored.json.read_text())
    assert saved["lm_eval_version"] == version("lm_eval")
    assert saved["settings"]["tasks"] == list(SHIPPED) and saved["settings"]["limit"] == 4
    assert [s["value"] for s in saved["scores"]] == [s.value for s in scored.result.scores]


def test_shipped_tasks_are_found_with_their_data():
    tasks = shipped_tasks()
    assert list(tasks) == list(SHIPPED)
    for path in tasks.values():
        assert path.parent == SHIPPED_DIR
        assert (SHIPPED_DIR / f"{path.stem}.jsonl").is_file()


def test_task_hash_names_data_by_content_not_by_path(tmp_path):
    first, second = tmp_path / "a" / "rows.jsonl", tmp_path / "b" / "rows.jsonl"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')

    def config(path: Path, prompt: str = "{{question}}") -> dict:
        return {
            "task": "t",
            "doc_to_text": prompt,
            "dataset_kwargs": {"data_files": {"test": str(path)}},
        }

    assert task_hash(config(first)) == task_hash(config(second))  # moved data: same task
    assert task_hash(config(first)) != task_hash(config(first, "Q: {{question}}"))
    second.write_text('{"question": "What is 1 + 2?", "answer": "3"}\n')
    assert task_hash(config(first)) != task_hash(config(second))  # other data: another task


def test_empty_task_list_and_missing_include_path_are_refused(tmp_path):
    with pytest.raises(RecipeError, match="`tasks=` is empty"):
        check_tasks(HarnessSettings(()))
    with pytest.raises(RecipeError, match="is not a folder"):
        check_tasks(HarnessSettings(SHIPPED, include_path=tmp_path / "nowhere"))


def test_a_task_of_your_own_from_include_path(scored, tmp_path):
    """A user's YAML (absolute data path) beside a shipped task, scored the same way."""
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(f'{{"q": "What is {i} + 1?", "a": "{i + 1}"}}\n' for i in range(3)))
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "my_sums.yaml").write_text(
        "task: my_sums\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\n'
        "doc_to_choice: ['{{a}}', '0']\n"
        "doc_to_target: 0\n"
        "metric_list:\n  - metric: acc\n"
    )
    run_dir = scored.csv.parent
    settings = HarnessSettings(("my_sums", "recipe_arith_mc"), limit=3, include_path=folder)
    check_tasks(settings)
    result = score_harness(run_dir, settings, "compare-own").result
    assert [(s.model, s.task) for s in result.scores] == [
        ("base", "my_sums"),
        ("base", "recipe_arith_mc"),
        ("llm", "my_sums"),
        ("llm", "recipe_arith_mc"),
    ]
    assert all(0.0 <= s.value <= 1.0 and len(s.task_hash) == 64 for s in result.scores)
    assert {s.n for s in result.scores if s.task == "my_sums"} == {3}
