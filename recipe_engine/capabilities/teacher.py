"""A teacher: the model a distilling stage learns from (`stage.<name>.teacher.from_stage`).

The teacher is another stage of the recipe, an input of the stage as its parent is: the graph
orders it first (and a scheduler waits for it), the stage's key hashes the teacher's key (a
retrained teacher retrains the student), its weights sit frozen on the memory estimate, and
`run` loads them (merged, where it trained an adapter; an evaluation stage's model as it
evaluated it) and hands them to the trainer as `teacher_model`. Teacher and student must share
one tokenizer, since the loss compares their next-token distributions token for token:
`resolve` read both models' tokenizer files (their digests) and config.json, so a different
vocabulary is refused in `plan`, without loading a weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import (
    NOTHING,
    CapabilityPlan,
    FromStage,
    FrozenModel,
    InputRef,
    StageFacts,
    Vocabulary,
)
from recipe_engine.errors import RecipeError

ROLE = "teacher"
# The files of a saved tokenizer that hold its vocabulary and special tokens (whichever of
# them a tokenizer saved): equal digests, one tokenizer. tokenizer_config.json is left out: it
# also holds settings (a length limit, a name) that differ between models of one vocabulary.
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


@dataclass(frozen=True)
class Teacher:
    name: str = ROLE
    sections: tuple[str, ...] = (ROLE,)
    argument: str = "teacher_model"  # the trainer's (TRL's DistillationTrainer)

    def check_config(
        self, stage: str, config: Mapping[str, Any], kind: str, having: Sequence[str]
    ) -> None:
        """A teacher where the stage's trainer learns from one, and only there."""
        key, teacher = f"stage.{stage}.{ROLE}.from_stage", _named(config)
        learns = kind in having and not config.get("evaluate_only")
        if teacher is not None and not learns:
            trains = "evaluates only" if config.get("evaluate_only") else f"trains with {kind}"
            raise RecipeError(
                f"`{key}` is `{teacher}`, but stage `{stage}` {trains}, which learns from no "
                f"{ROLE}. Drop the key ({key}=null), or set stage.{stage}.trainer="
                f"{' or '.join(having)} to have it learn from `{teacher}`.",
                key=key,
            )
        if teacher is None and learns:
            raise RecipeError(
                f"Stage `{stage}` trains with {kind}, which learns from a {ROLE} model, but "
                f"`{key}` is not set. Name the stage whose weights it learns from: {key}=<stage> "
                "(a stage of this recipe, with the same tokenizer).",
                key=key,
            )

    def inputs(self, stage: str, config: Mapping[str, Any]) -> dict[str, InputRef]:
        teacher = _named(config)
        key = f"stage.{stage}.{ROLE}.from_stage"
        return {ROLE: InputRef(teacher, key)} if teacher is not None else {}

    def plan(self, facts: StageFacts) -> CapabilityPlan:
        teacher = facts.inputs.get(ROLE)
        if teacher is None:
            return NOTHING
        _check_same_tokenizer(facts, teacher.name, teacher.vocabulary)
        return CapabilityPlan(
            key={ROLE: teacher.fingerprint},
            frozen=(FrozenModel(f"{ROLE} model", teacher.params),),
            loads=(FromStage(self.argument, teacher.name, ROLE),),
        )

    def curves(self, logged: Sequence[str]) -> list[tuple[str, str]]:
        return []

    def code_from_elsewhere(self, setting: str, value: Any, root: Path) -> str | None:
        return None  # it names a stage, never code


def _named(config: Mapping[str, Any]) -> str | None:
    return (config.get(ROLE) or {}).get("from_stage")


def _check_same_tokenizer(facts: StageFacts, teacher: str, theirs: Vocabulary | None) -> None:
    """The teacher's vocabulary is the student's: the same vocabulary files (digests) where
    both models' tokenizers were read, and the same `vocab_size` in their configs."""
    ours = facts.vocabulary
    if ours is None or theirs is None:
        return  # neither config nor tokenizer at hand here: TRL compares vocab sizes on load
    differs = ours.size != theirs.size
    if ours.files and theirs.files:
        shared = [f for f in VOCABULARY_FILES if f in ours.files and f in theirs.files]
        differs = differs or not shared or any(ours.files[f] != theirs.files[f] for f in shared)
    if differs:
        name = facts.name
        raise RecipeError(
            f"`stage.{name}.{ROLE}.from_stage` is `{teacher}`, whose tokenizer differs from "
            f"stage `{name}`'s (vocab_size {theirs.size} against {ours.size}, or other "
            "vocabulary files): distillation compares the two models' next-token "
            f"distributions token for token, so they must share one tokenizer. Learn from a "
            f"{ROLE} of the same model family (same tokenizer), or start stage `{name}` from "
            f"a model with the {ROLE}'s tokenizer.",
            key=f"stage.{name}.{ROLE}.from_stage",
        )


TEACHER = Teacher()
