"""A stage's trainer against its rows, and what `plan` says of a preference stage's trainer.

Pure: the rows' format (`resolve` surveyed it) decides whether the trainer can take them, so a
trainer given another kind of rows than it learns from (instruction rows, preference pairs,
unpaired feedback: `trainers`), or image rows for a text-only trainer, is refused before
any weight loads, with the trainer that does take them.
"""

from __future__ import annotations

import dataclasses

from recipe_engine.config import library_keys
from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.formats import has_images, rows_kind
from recipe_engine.resolve.inputs import Rows
from recipe_engine.trainers import AUTO, TRAINERS, trainer_for, trainers_taking
from recipe_engine.trainers.kind import (
    INSTRUCTION_ROWS,
    PREFERENCE_ROWS,
    ROWS_IN_WORDS,
    UNPAIRED_ROWS,
    TrainerKind,
)

PAIR_COLUMNS = "prompt / chosen / rejected"
# The columns each kind of rows needs, and the column a user most often maps to them.
COLUMNS = {
    INSTRUCTION_ROWS: ("messages, or prompt / completion", "completion"),
    PREFERENCE_ROWS: (PAIR_COLUMNS, "chosen"),
    UNPAIRED_ROWS: ("prompt / completion / label", "label"),
}


def choose_trainer(name: str, stage: StageConfig, rows: Rows) -> tuple[StageConfig, str]:
    """A stage left at `trainer: auto` trains with the trainer its rows call for (the first
    kind that takes them: `trainer_for`), its `train` keys checked against that trainer's
    settings class; the stage as decided, and why, for `plan`'s note ("" where the trainer was
    named, or its rows are instructions). An evaluation stage trains nothing: the default
    kind's settings stand for it."""
    if stage.trainer != AUTO:
        return stage, ""
    given = INSTRUCTION_ROWS if stage.evaluate_only else rows_kind(rows.format)
    kind = TRAINERS[trainer_for(given)]
    try:
        library_keys.check_train(name, stage.train, kind.settings_class)
    except RecipeError as refusal:
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name} (stage.{name}.trainer is auto and its "
            f"rows are {ROWS_IN_WORDS[given]}): {refusal}",
            key=refusal.key,
        ) from None
    chosen = dataclasses.replace(stage, trainer=kind.name)
    if given == INSTRUCTION_ROWS:
        return chosen, ""  # as every stage trained before trainers were a choice
    others = [t for t in trainers_taking(given) if t != kind.name]
    instead = f"; stage.{name}.trainer={_either(others)} trains another" if others else ""
    return chosen, f"chosen by its rows, {ROWS_IN_WORDS[given]}{instead}"


def check_rows_fit_trainer(name: str, stage: StageConfig, rows: Rows) -> None:
    """The stage's trainer takes rows of this kind (`trainers`)."""
    if stage.evaluate_only:
        return  # no trainer: the held-out rows are only asked
    kind = TRAINERS[stage.trainer]
    given = rows_kind(rows.format)
    if given != kind.rows:
        raise RecipeError(_mismatch(name, kind, given, rows), key=f"stage.{name}.trainer")
    if has_images(rows.format) and not kind.images:
        takers = [t for t in trainers_taking(given) if TRAINERS[t].images]
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name} on image rows, but TRL's "
            f"{kind.trainer_class} takes text only. Use stage.{name}.trainer={_either(takers)} "
            "for image rows of this kind, or give the stage text rows.",
            key=f"stage.{name}.trainer",
        )


def _mismatch(name: str, kind: TrainerKind, given: str, rows: Rows) -> str:
    """One message each way: what the trainer learns from, what the data holds, and the two
    fixes (the trainer that takes these rows, or rows the trainer takes)."""
    columns, mapped = COLUMNS[kind.rows]
    return (
        f"Stage `{name}` trains with {kind.name}, which learns from {ROWS_IN_WORDS[kind.rows]}, "
        f"but its data ({rows.describe()}) holds {ROWS_IN_WORDS[given]}. Set "
        f"stage.{name}.trainer={_either(trainers_taking(given))} to learn from them, or give "
        f"the stage {columns} rows (stage.{name}.data.path=<file>; map your columns with "
        f"stage.{name}.data.columns.{mapped}=<column> ...)."
    )


def _either(names: list[str]) -> str:
    """`dpo (or orpo)`: the first trainer, the others in brackets."""
    first, *others = names
    return f"{first} (or {', '.join(others)})" if others else first


def trainer_notes(stage: StageConfig, chosen: str = "") -> list[str]:
    """What `plan` says of a preference stage's trainer (`chosen`: why, where its rows chose
    it); its reference is its capability's to say."""
    if stage.evaluate_only or stage.trainer not in TRAINERS:
        return []
    kind = TRAINERS[stage.trainer]
    if not kind.judged:
        return []
    line = f"trainer: {kind.name} ({kind.module}.{kind.trainer_class})"
    if chosen:
        line += f", {chosen}"
    if kind.experimental:
        line += ": TRL ships it as experimental, its settings may change between releases"
    return [line]
