"""The judged rows' section of a comparison and an experiment: one table for preference pairs,
another for unpaired feedback, each model a row, and the answer line on the headline metric
(reward accuracy on pairs, label accuracy on unpaired feedback)."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.report.experiment import RecipeRun
from recipe_engine.report.preference import (
    TABLES,
    experiment_judged,
    judged_table,
    preference_answer,
    table_for,
)

PAIRS = {"pairs": 48, "reward_accuracy": 0.98, "logratio_margin": 49.0, "pair_accuracy": 0.98,
         "win_rate": 0.93, "judged": "preference"}  # fmt: skip
FEEDBACK = {"rows": 64, "label_accuracy": 0.70, "ranking_accuracy": 0.87,
            "logratio_margin": 22.3, "desirable_match": 0.12, "undesirable_match": 0.03,
            "judged": "unpaired"}  # fmt: skip


def run(recipe: str, preference: dict, base: dict | None = None) -> RecipeRun:
    return RecipeRun(recipe, 0, Path("r"), "final", None, None, "", 1, 1.0, None,
                     preference=preference, base_preference=base)  # fmt: skip


def test_unpaired_feedback_gets_its_own_columns_and_pairs_keep_theirs():
    base = {"rows": 64, "desirable_match": 0.0, "undesirable_match": 0.0, "judged": "unpaired"}
    lines = judged_table({"base": base, "llm": None, "kto": FEEDBACK})
    assert lines[0].split()[:3] == ["model", "rows", "label"]
    assert [line.split()[0] for line in lines[1:]] == ["base", "kto"]  # llm was not judged
    assert "70%" in lines[-1] and "87%" in lines[-1] and "22.30" in lines[-1]
    assert table_for({"kto": FEEDBACK}) is TABLES["unpaired"]
    old = {key: value for key, value in PAIRS.items() if key != "judged"}  # before KTO
    assert table_for({"dpo": old}) is TABLES["preference"]
    assert "reward acc (vs base)" in judged_table({"dpo": old}, markdown=True)[0]
    assert table_for({"llm": None}) is None and judged_table({}) == []


def test_the_answer_line_compares_recipes_by_label_accuracy_on_unpaired_feedback():
    sft = {**FEEDBACK, "label_accuracy": 0.17}
    runs = [run("text-lora", sft, base=FEEDBACK), run("r6-sft-kto-text", FEEDBACK)]
    answer = preference_answer(runs)
    assert answer is not None
    assert answer.startswith(
        "answer on unpaired feedback: r6-sft-kto-text has the higher held-out label accuracy "
        "against the base over 64 rows; r6-sft-kto-text vs text-lora: +53 points"
    )
    assert list(experiment_judged(runs)) == ["base", "text-lora (final)", "r6-sft-kto-text (final)"]
    pairs = [run("r3", {**PAIRS, "reward_accuracy": 0.25}), run("r5", PAIRS)]
    assert preference_answer(pairs).startswith("answer on preference pairs: r5 has the higher")
    assert preference_answer(runs[:1]) is None  # one recipe: nothing to compare
