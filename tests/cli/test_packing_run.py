"""A text stage trained with packing scores what it scores unpacked: TRL's BFD packing on the
tiny Qwen2 (sdpa attention, rows kept apart by the mask transformers builds from position_ids),
against the same stage unpacked, on the same rows."""

from __future__ import annotations

from pathlib import Path

from engine_cli import engine, manifests

SHORT = (
    "recipe=text-lora",
    "data.max_samples=200",
    "eval.max_samples=32",
    "eval.compare=false",
    "stage.llm.train.max_length=128",
)
# About the 16 rows of the unpacked batch: 4 sequences of 128 tokens of ~30-token rows.
PACKED = ("stage.llm.train.packing=true", "stage.llm.train.per_device_train_batch_size=4")


def test_a_packed_text_stage_scores_the_held_out_rows_as_the_unpacked_one(tmp_path: Path):
    unpacked = engine(*SHORT, "output_root=unpacked", cwd=tmp_path)
    assert unpacked.returncode == 0, unpacked.stderr[-3000:]
    packed = engine(*SHORT, *PACKED, "output_root=packed", cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr[-3000:]
    plain = manifests(tmp_path / "unpacked")["llm"]
    stage = manifests(tmp_path / "packed")["llm"]
    assert stage["trainer"]["packing"] is True and not plain["trainer"].get("packing")
    assert stage["fingerprint"] != plain["fingerprint"]
    # The packed rows are counted once packed: the guard's steps are the trainer's.
    assert stage["metrics"]["steps"] == stage["metrics"]["planned_steps"]
    packed_metrics, plain_metrics = stage["metrics"], plain["metrics"]
    assert abs(packed_metrics["eval_loss"] - plain_metrics["eval_loss"]) < 0.15
    assert abs(packed_metrics["eval_accuracy"] - plain_metrics["eval_accuracy"]) <= 0.2
    assert packed_metrics["eval_loss"] < packed_metrics["preflight_loss"] / 2  # it learned
