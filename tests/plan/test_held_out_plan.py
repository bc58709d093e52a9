"""What `plan` says and keys about held-out rows: a user's file without a split is evaluated on
rows held out automatically, too small a file or `data.eval_fraction=0` trains unevaluated
(a note, not a refusal), and the keys of data with its own split stay as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_kit import write_alpaca
from plans import plan

from recipe_engine.errors import RecipeError
from recipe_engine.plan.render import render_plan
from recipe_engine.resolve.held_out import HeldOut

TEXT = ("recipe=text-lora", "data.source=local")


def own_file(path: Path, *overrides: str):
    return plan(*TEXT, f"data.path={path}", *overrides)


def test_the_data_line_counts_the_rows_held_out_automatically(tmp_path: Path) -> None:
    planned = own_file(write_alpaca(tmp_path / "alpaca.json", 42))
    llm = planned.stages["llm"]
    assert (llm.data.train_rows, llm.data.eval_rows, llm.data.held_out) == (38, 4, HeldOut.AUTO)
    line = next(line for line in render_plan(planned).splitlines() if "data:" in line)
    assert "38 train / 4 held out automatically (10%" in line
    assert "chosen by the rows' content; data.eval_fraction=0 trains on all" in line
    assert not [note for note in llm.notes if "not evaluated" in note]


def test_automatic_and_eval_fraction_zero_are_other_rows_and_other_keys(tmp_path: Path) -> None:
    path = write_alpaca(tmp_path / "alpaca.json", 42)
    auto = own_file(path).stages["llm"]  # surveyed first: its record must not serve `0`
    zero = own_file(path, "data.eval_fraction=0").stages["llm"]
    assert (zero.data.train_rows, zero.data.eval_rows, zero.data.held_out) == (42, 0, HeldOut.NONE)
    assert zero.fingerprint != auto.fingerprint and zero.data.identity != auto.data.identity
    # Not evaluated: every row trains, as with data.eval_fraction=0, so the same key.
    unevaluated = own_file(path, "eval.enabled=false").stages["llm"]
    assert unevaluated.data.eval_rows == 0 and unevaluated.fingerprint == zero.fingerprint


def test_every_seed_holds_out_the_same_rows(tmp_path: Path) -> None:
    path = write_alpaca(tmp_path / "alpaca.json", 42)
    zero, one = own_file(path, "seed=0"), own_file(path, "seed=1")
    assert zero.stages["llm"].data.identity == one.stages["llm"].data.identity
    assert zero.stages["llm"].fingerprint != one.stages["llm"].fingerprint  # seeds train apart


def test_eval_fraction_zero_on_an_evaluated_stage_trains_unevaluated_with_a_note(
    tmp_path: Path,
) -> None:
    llm = own_file(write_alpaca(tmp_path / "a.json", 42), "data.eval_fraction=0").stages["llm"]
    [note] = [note for note in llm.notes if note.startswith("not evaluated")]
    assert "data.eval_fraction=0" in note and "every row trains" in note
    assert "none held out" in llm.data.describe()


def test_a_file_too_small_to_split_trains_unevaluated_with_a_note(tmp_path: Path) -> None:
    llm = own_file(write_alpaca(tmp_path / "small.json", 12)).stages["llm"]
    assert (llm.data.train_rows, llm.data.eval_rows, llm.data.held_out) == (12, 0, HeldOut.TOO_FEW)
    [note] = [note for note in llm.notes if note.startswith("not evaluated")]
    assert "fewer than 20 rows" in note and "data.eval_fraction=0.25" in note
    assert "fewer than 20 rows" in llm.data.describe()


def test_an_evaluation_stage_holds_rows_out_of_its_parent_even_unevaluated(tmp_path: Path) -> None:
    """With eval.enabled=false the stages are not evaluated after training, but an evaluation
    stage asks the trained stage the rows it held out: that stage must not train on them."""
    path = write_alpaca(tmp_path / "alpaca.json", 42)
    evaluation = ("+stages@stage.eval=evaluate", "+stage.eval.init.from_stage=llm")
    planned = own_file(path, "eval.enabled=false", *evaluation)
    llm, ask = planned.stages["llm"], planned.stages["eval"]
    assert llm.data.eval_rows == ask.data.eval_rows == 4
    assert llm.data.identity == ask.data.identity  # the same rows held out of both
    with pytest.raises(RecipeError) as refused:
        own_file(path, "data.eval_fraction=0", *evaluation)
    assert "Evaluation stage `eval` needs a held-out split" in str(refused.value)
    assert refused.value.key == "data.eval_fraction"


def test_built_in_data_keeps_its_split_and_its_keys() -> None:
    auto, zero = plan("recipe=text-lora"), plan("recipe=text-lora", "data.eval_fraction=0")
    llm = auto.stages["llm"]
    assert llm.data.held_out is HeldOut.SPLIT and llm.data.eval_rows == 64
    assert llm.fingerprint == zero.stages["llm"].fingerprint
    # The key text-lora's stage has (key version 2): held-out rows left it as it was.
    assert llm.fingerprint.startswith("1871f5ce4cf9")
