"""recipe_engine.resolve.held_out through `load_splits`: data without a held-out split of its
own holds out a share of its rows automatically, chosen by the rows' content (not the seed);
too small a file trains on every row; explicit `data.eval_fraction` values and data with its
own held-out split read exactly the rows they read before."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_kit import data, error, load, msgs, write_jsonl

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import check_data, data_identity
from recipe_engine.resolve.held_out import (
    AUTO_MAX_ROWS,
    AUTO_MIN_DATA_ROWS,
    AUTO_MIN_ROWS,
    HeldOut,
    auto_count,
)


def questions(rows) -> list[str]:
    return [row["messages"][0]["content"] for row in rows]


def chats(path: Path, n: int, tag: str = "") -> Path:
    """`n` conversations asking q{tag}0, q{tag}1, ..."""
    return write_jsonl(path, [msgs(("user", f"q{tag}{i}"), ("assistant", "a")) for i in range(n)])


def test_a_tenth_of_the_rows_is_held_out_and_the_files_order_kept(tmp_path: Path) -> None:
    splits = load(chats(tmp_path / "d.jsonl", 100))
    assert (len(splits.train), len(splits.eval), splits.held_out) == (90, 10, HeldOut.AUTO)
    train, held_out = questions(splits.train), questions(splits.eval)
    assert sorted(train + held_out) == sorted(f"q{i}" for i in range(100))  # a partition
    number = [int(q[1:]) for q in held_out]
    assert number == sorted(number) and [int(q[1:]) for q in train] == sorted(
        int(q[1:]) for q in train
    )


def test_the_share_has_a_floor_and_a_ceiling() -> None:
    assert AUTO_MIN_DATA_ROWS == 20 and (AUTO_MIN_ROWS, AUTO_MAX_ROWS) == (4, 500)
    assert [auto_count(n) for n in (19, 20, 44, 46, 100, 4994, 4996, 100_000)] == [
        0,  # too few to spare any
        4,  # the floor: 10% would be 2
        4,
        5,  # 10% rounded from here on
        10,
        499,
        500,  # the ceiling
        500,
    ]


def test_the_floor_holds_on_a_file(tmp_path: Path) -> None:
    splits = load(chats(tmp_path / "d.jsonl", AUTO_MIN_DATA_ROWS))
    assert (len(splits.train), len(splits.eval)) == (16, 4)


def test_every_seed_holds_out_the_same_rows(tmp_path: Path) -> None:
    path = chats(tmp_path / "d.jsonl", 60)
    zero, one = load(path, seed=0), load(path, seed=1)
    assert questions(zero.eval) == questions(one.eval) and len(zero.eval) == 6
    assert zero.identity == one.identity


def test_other_content_holds_out_other_rows(tmp_path: Path) -> None:
    ours = load(chats(tmp_path / "ours.jsonl", 60))
    theirs = load(chats(tmp_path / "theirs.jsonl", 60, tag="x"))  # other bytes, same count
    assert [q[1:] for q in questions(ours.eval)] != [q[2:] for q in questions(theirs.eval)]
    assert len(theirs.eval) == len(ours.eval) == 6


def test_the_same_bytes_elsewhere_hold_out_the_same_rows(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    here = load(chats(tmp_path / "d.jsonl", 60))
    there = load(chats(tmp_path / "elsewhere" / "d.jsonl", 60))
    assert questions(here.eval) == questions(there.eval)


def test_max_samples_caps_the_training_rows_after_the_hold_out(tmp_path: Path) -> None:
    path = chats(tmp_path / "d.jsonl", 60)
    whole, capped = load(path), load(path, max_samples=5)
    assert questions(capped.eval) == questions(whole.eval)
    assert questions(capped.train) == questions(whole.train)[:5]


def test_a_file_too_small_to_split_trains_on_every_row(tmp_path: Path) -> None:
    splits = load(chats(tmp_path / "d.jsonl", AUTO_MIN_DATA_ROWS - 1))
    assert splits.eval is None and splits.held_out is HeldOut.TOO_FEW
    assert len(splits.train) == AUTO_MIN_DATA_ROWS - 1


def test_eval_fraction_zero_trains_on_every_row(tmp_path: Path) -> None:
    splits = load(chats(tmp_path / "d.jsonl", 60), eval_fraction=0)
    assert splits.eval is None and splits.held_out is HeldOut.NONE and len(splits.train) == 60


def test_the_automatic_rows_are_other_rows_than_eval_fraction_zero(tmp_path: Path) -> None:
    path = chats(tmp_path / "d.jsonl", 60)
    auto, none = load(path), load(path, eval_fraction=0)
    assert auto.identity != none.identity
    assert none.identity == data_identity(data(path=str(path), eval_fraction=0))
    # Too few rows to hold any out: the same training rows as eval_fraction=0, the same name.
    small = chats(tmp_path / "small.jsonl", 10)
    assert load(small).identity == load(small, eval_fraction=0).identity


def test_an_explicit_fraction_draws_with_the_seed_as_before(tmp_path: Path) -> None:
    path = chats(tmp_path / "d.jsonl", 20)
    splits = load(path, eval_fraction=0.25, seed=1)
    # The rows the engine held out before the automatic rule (pinned: keys name them).
    assert questions(splits.eval) == ["q5", "q9", "q11", "q17", "q19"]
    assert splits.held_out is HeldOut.FRACTION and len(splits.train) == 15
    assert splits.identity == data_identity(data(path=str(path), eval_fraction=0.25))
    assert questions(load(path, eval_fraction=0.25, seed=2).eval) != questions(splits.eval)


def test_an_explicit_fraction_too_large_for_the_file_is_refused(tmp_path: Path) -> None:
    message = error(chats(tmp_path / "d.jsonl", 2), eval_fraction=0.9)
    assert "2 row(s)" in message and "data.eval_fraction=0" in message


def test_data_with_its_own_eval_split_is_read_as_before(tmp_path: Path) -> None:
    chats(tmp_path / "train.jsonl", 60)
    chats(tmp_path / "eval.jsonl", 3, tag="e")
    splits = load(tmp_path)
    assert splits.held_out is HeldOut.SPLIT and len(splits.train) == 60
    assert questions(splits.eval) == ["qe0", "qe1", "qe2"]
    # Automatic and 0 name the same rows here, by the identity they always had.
    assert splits.identity == load(tmp_path, eval_fraction=0).identity
    assert splits.identity == data_identity(data(path=str(tmp_path)))


def test_a_validation_split_counts_as_the_datas_own(tmp_path: Path) -> None:
    chats(tmp_path / "train.jsonl", 60)
    chats(tmp_path / "validation.jsonl", 2, tag="v")
    assert load(tmp_path).held_out is HeldOut.SPLIT


@pytest.mark.parametrize("value", [None, 0, 0.0, 0.2, 0.99])
def test_eval_fraction_is_null_or_a_fraction(value: float | None) -> None:
    checked = check_data(data(path="x", eval_fraction=value)).eval_fraction
    assert checked == value and (checked is None or isinstance(checked, float))


@pytest.mark.parametrize("value", [-0.1, 1, 1.5, float("nan"), "some"])
def test_other_eval_fractions_are_refused_naming_the_key(value: object) -> None:
    with pytest.raises(RecipeError) as info:
        check_data(data(path="x", eval_fraction=value))
    assert info.value.key == "data.eval_fraction" and "[0, 1)" in str(info.value)
