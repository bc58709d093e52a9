"""An online stage's rewards: the built-in rules, a user's function found by import path or
file, called as TRL calls it on sample rows, and its source hashed (a changed source refuses to
train under the key that hashed the old one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from recipe_engine.config.schema import RewardConfig
from recipe_engine.errors import RecipeError
from recipe_engine.rewards import builtin, check_on_rows, load, planned_rewards

CHAT_COMPLETIONS = [
    [{"role": "assistant", "content": " 7 "}],
    [{"role": "assistant", "content": "8"}],
]
ROWS = [{"prompt": "What is 3 + 4?", "answer": "7"}, {"prompt": "What is 1 + 1?", "answer": "2"}]


def test_builtin_rules_score_text_and_chat_completions():
    assert builtin.exact_match([], ["7", " 7\n", "17"], answer=["7", "7", "7"]) == [1.0, 1.0, 0.0]
    assert builtin.exact_match([], CHAT_COMPLETIONS, answer=["7", "7"]) == [1.0, 0.0]
    assert builtin.contains([], ["It is 7.", "It is 8."], answer=["7", "7"]) == [1.0, 0.0]
    assert builtin.exact_match([], ["blue"], column="solution", solution=["blue"]) == [1.0]
    assert builtin.format_match([], ["<a>7</a>", "7"], pattern=r"<a>\d+</a>") == [1.0, 0.0]
    assert builtin.length_penalty([], ["x" * 4, "x" * 16], max_length=8) == [0.0, -1.0]
    with pytest.raises(KeyError, match="no `solution` column"):
        builtin.exact_match([], ["7"], column="solution", answer=["7"])


def write(folder: Path, source: str) -> Path:
    path = folder / "my_rewards.py"
    path.write_text(source)
    return path


GOOD = """
def digits(prompts, completions, answer, **columns):
    return [float(str(a) in str(c)) for c, a in zip(completions, answer)]
"""


def test_a_users_function_is_found_by_file_called_on_rows_and_named_for_the_logs(tmp_path):
    path = write(tmp_path, GOOD)
    (reward,) = planned_rewards("grpo", [RewardConfig(fn=f"{path}:digits", weight=0.5)])
    assert (reward.label, reward.weight) == ("digits", 0.5)
    check_on_rows("grpo", reward, ROWS)
    function = load(reward)
    assert function.__name__ == "digits"
    assert function(prompts=["q"], completions=["It is 7"], answer=["7"]) == [1.0]
    assert not (tmp_path / "__pycache__").exists(), "nothing is written beside the user's file"


def test_a_users_function_is_found_by_import_path(tmp_path, monkeypatch):
    write(tmp_path, GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    (reward,) = planned_rewards("grpo", [RewardConfig(fn="my_rewards:digits")])
    check_on_rows("grpo", reward, ROWS)
    sys.modules.pop("my_rewards", None)


def test_a_changed_source_is_a_new_key_and_refuses_to_train_under_the_old(tmp_path):
    path = write(tmp_path, GOOD)
    (before,) = planned_rewards("grpo", [RewardConfig(fn=f"{path}:digits")])
    write(tmp_path, GOOD + "\n# tuned\n")
    (after,) = planned_rewards("grpo", [RewardConfig(fn=f"{path}:digits")])
    assert before.source_digest != after.source_digest
    with pytest.raises(RecipeError, match="changed since the stage was planned"):
        load(before)


def test_builtins_take_their_options_and_are_keyed_by_them():
    entries = [RewardConfig(name="format", pattern=r"\d+"), RewardConfig(name="exact_match")]
    fmt, exact = planned_rewards("grpo", entries)
    assert fmt.options == (("pattern", r"\d+"),)
    assert exact.options == (("column", "answer"),)
    check_on_rows("grpo", fmt, ROWS)
    assert load(fmt)(prompts=[], completions=["12", "x"]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([RewardConfig()], "must set one of `name`"),
        ([RewardConfig(name="exact_match", fn="m:f")], "must set one of `name`"),
        ([RewardConfig(name="format")], "sets no `pattern`"),
        ([RewardConfig(name="format", pattern="(")], "not a regular expression"),
        ([RewardConfig(name="exact_match")] * 2, "are both called `exact_match`"),
        ([RewardConfig(fn="no_colon")], "write `package.module:function`"),
        ([RewardConfig(name="exact_match", weight=float("nan"))], "finite number"),
    ],
)
def test_bad_entries_are_one_message_naming_the_entry(entries, expected):
    with pytest.raises(RecipeError, match=expected) as refused:
        planned_rewards("grpo", entries)
    assert refused.value.key.startswith("stage.grpo.rewards[")


def test_a_reward_reading_a_column_the_rows_lack_is_refused_on_the_rows():
    (reward,) = planned_rewards("grpo", [RewardConfig(name="exact_match", column="solution")])
    with pytest.raises(RecipeError, match="no `solution` column"):
        check_on_rows("grpo", reward, ROWS)


def test_a_users_file_runs_once_a_process_for_its_plan_check_and_its_run(tmp_path):
    counted = tmp_path / "imports.txt"
    path = write(tmp_path, f"open({str(counted)!r}, 'a').write('x')\n" + GOOD)
    (reward,) = planned_rewards("grpo", [RewardConfig(fn=f"{path}:digits")])
    check_on_rows("grpo", reward, ROWS)
    load(reward)
    assert counted.read_text() == "x"
