"""A stage's teacher (`stage.<name>.teacher`), decided and checked before a weight loads.

A stage whose trainer learns from a teacher (`TrainerKind.teacher`) names the stage whose
weights it distills (`teacher.from_stage`); every other stage names none. The teacher is an
input of the stage as its parent is: the graph (`plan.dag`) orders it first, the stage's key
hashes the teacher's key (a retrained teacher retrains the student), and its weights sit on
the memory estimate. Teacher and student must share one tokenizer, since the loss compares
their next-token distributions token for token: `resolve` read both models' tokenizer files
(their digests) and config.json, so a different vocabulary is refused here, without loading
a weight.

Pure: plain data in, a RecipeError or the teacher's plan out.
"""

from __future__ import annotations

from collections.abc import Mapping

from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.recipe_plan import StagePlan
from recipe_engine.resolve.inputs import ModelFiles, StageInputs
from recipe_engine.trainers import TRAINERS

# The files of a saved tokenizer that hold its vocabulary and special tokens (whichever of
# them a tokenizer saved): equal digests, one tokenizer. tokenizer_config.json is left out: it
# also holds settings (a length limit, a name) that differ between models of one vocabulary.
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


def teacher_kinds() -> str:
    """The trainers that learn from a teacher, as a refusal names them."""
    return " or ".join(kind.name for kind in TRAINERS.values() if kind.teacher)


def check_teacher_setting(name: str, stage: StageConfig) -> None:
    """A teacher where the stage's trainer learns from one, and only there."""
    key, teacher = f"stage.{name}.teacher.from_stage", stage.teacher.from_stage
    kind = TRAINERS.get(stage.trainer)  # None: auto, which never chooses a teacher's kind
    learns = kind is not None and kind.teacher and not stage.evaluate_only
    if teacher is not None and not learns:
        trains = "evaluates only" if stage.evaluate_only else f"trains with {stage.trainer}"
        raise RecipeError(
            f"`{key}` is `{teacher}`, but stage `{name}` {trains}, which learns from no "
            f"teacher. Drop the key (stage.{name}.teacher.from_stage=null), or set "
            f"stage.{name}.trainer={teacher_kinds()} to have it learn from `{teacher}`.",
            key=key,
        )
    if teacher is None and learns:
        raise RecipeError(
            f"Stage `{name}` trains with {stage.trainer}, which learns from a teacher model, "
            f"but `{key}` is not set. Name the stage whose weights it learns from: "
            f"{key}=<stage> (a stage of this recipe, with the same tokenizer).",
            key=key,
        )


def teacher_plan(
    name: str,
    teacher: str | None,
    planned: Mapping[str, StagePlan],
    inputs: Mapping[str, StageInputs],
) -> StagePlan | None:
    """The teacher's plan (planned before the stage: the graph orders it first), its
    tokenizer checked against the stage's; None where the stage has no teacher."""
    if teacher is None:
        return None
    check_same_tokenizer(name, teacher, inputs[name].model.files, inputs[teacher].model.files)
    return planned[teacher]


def check_same_tokenizer(
    name: str, teacher: str, student: ModelFiles | None, taught_by: ModelFiles | None
) -> None:
    """The teacher's vocabulary is the student's: the same vocabulary files (digests) where
    both models' tokenizers were read, and the same `vocab_size` in their configs."""
    if student is None or taught_by is None:
        return  # neither config nor tokenizer at hand here: TRL compares vocab sizes on load
    key = f"stage.{name}.teacher.from_stage"
    differs = _vocab_size(student) != _vocab_size(taught_by)
    if student.tokenizer is not None and taught_by.tokenizer is not None:
        ours, theirs = student.tokenizer.files, taught_by.tokenizer.files
        shared = [f for f in VOCABULARY_FILES if f in ours and f in theirs]
        differs = differs or not shared or any(ours[f] != theirs[f] for f in shared)
    if differs:
        raise RecipeError(
            f"`{key}` is `{teacher}`, whose tokenizer differs from stage `{name}`'s "
            f"(vocab_size {_vocab_size(taught_by)} against {_vocab_size(student)}, or other "
            "vocabulary files): distillation compares the two models' next-token "
            "distributions token for token, so they must share one tokenizer. Learn from a "
            f"teacher of the same model family (same tokenizer), or start stage `{name}` from "
            "a model with the teacher's tokenizer.",
            key=key,
        )


def _vocab_size(files: ModelFiles) -> int | None:
    config = files.config
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    return config.get("vocab_size") or (text or {}).get("vocab_size")


def teacher_params(teacher: StagePlan | None) -> int:
    """The teacher's parameters, as the stage holds them (a LoRA teacher merged: its base's
    count); 0 without a teacher or where its config was not readable."""
    if teacher is None or teacher.policy.param_counts is None:
        return 0
    return sum(teacher.policy.param_counts.values())
