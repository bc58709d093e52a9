"""recipe_engine.report.known_failures: the seeds' messages, as they wrote them, are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.report.known_failures import diagnose, diagnosis_lines, read_log

SEED_FIRST = (
    "ValueError: You can't train a model that has been loaded with device_map='auto' in any "
    "distributed mode"
)
SEED_SECOND = (
    "RuntimeError: module must have its parameters and buffers on device cuda:0 "
    "(device_ids[0]) but found one of them on device: cpu"
)
FIELD_NOTES_1 = (
    "ValueError: SFTTrainer does not support nn.DataParallel, which Trainer uses when several "
    "GPUs are visible to a single process"
)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (SEED_FIRST, "device_map='auto' under a distributed launcher"),
        (SEED_SECOND, "parameters on another device than the process's"),
        (FIELD_NOTES_1, "nn.DataParallel in a single process"),
    ],
)
def test_each_seed_message_is_named_once(text: str, name: str) -> None:
    log = f"Traceback (most recent call last):\n  ...\n{text}\n{text}\n"
    assert [failure.name for failure in diagnose(log)] == [name]


def test_a_log_without_them_says_so() -> None:
    lines = diagnosis_lines("loss 1.2\nloss 0.9\ndone")
    assert lines == ["none of the known placement failures appears in this log"]


def test_an_unreadable_log_is_one_message(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="`log=.*missing.log` cannot be read") as error:
        read_log(str(tmp_path / "missing.log"))
    assert error.value.key == "log"


def test_a_log_that_is_not_utf8_is_still_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"\xff\xfe" + SEED_FIRST.encode())
    assert [f.name for f in diagnose(read_log(str(log)))] == [
        "device_map='auto' under a distributed launcher"
    ]
