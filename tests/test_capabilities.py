"""A capability owns its behaviour: what a kind adds beyond its rows (a teacher, a reference,
rewards, judged answers) lives in its own module behind `capabilities.Capability`, and the core
asks a stage's capabilities through that protocol, never whether it has one in particular.

Counted as code (identifiers and string literals; docstrings and comments are prose and left
out, `tests/code_words.py`):
- `teacher` is named in at most 4 package modules outside `capabilities/teacher.py`;
- `reward` in at most 4 outside `rewards/` (TRL's preference metrics, `rewards/accuracies`,
  are named in `capabilities/judged.py`, one of them);
- `TrainerKind` has no capability flag left to read, and no module outside the kinds and the
  capabilities imports a capability that plans or loads (teacher, reference, rewards): the
  core reaches them only through a kind's `capabilities`;
- the planner calls its pipeline's steps for every stage in one order, each once.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from code_words import code_words
from plans import plan

import recipe_engine
from recipe_engine.plan import pipeline, planner
from recipe_engine.trainers.kind import TrainerKind

PACKAGE = Path(recipe_engine.__file__).parent
# The flags a kind had before its capabilities owned what they add.
FLAGS = ("reference", "teacher", "online", "reloads_reference", "keeps_reference",
         "trainer_arguments", "estimates_kl")  # fmt: skip
# Capability modules whose behaviour the core must reach only through the protocol.
PLANNING_CAPABILITIES = (
    "recipe_engine.capabilities.teacher",
    "recipe_engine.capabilities.reference",
    "recipe_engine.rewards.capability",
)
OWNERS = ("capabilities/", "rewards/", "trainers/")


def naming(word: str, outside: str) -> list[str]:
    pattern = re.compile(word, re.IGNORECASE)
    return sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if not path.relative_to(PACKAGE).as_posix().startswith(outside)
        and code_words(path.read_text(), pattern)
    )


def test_the_teacher_is_named_in_at_most_four_modules_besides_its_own():
    found = naming("teacher", "capabilities/teacher.py")
    assert len(found) <= 4, found
    assert found == ["config/schema.py", "trainers/distill.py"]  # its keys; the kind having it


def test_rewards_are_named_in_at_most_four_modules_outside_their_own():
    found = naming("reward", "rewards/")
    assert len(found) <= 4, found
    assert found == [
        "capabilities/judged.py",  # TRL's implicit-reward metrics of the preference kinds
        "config/schema.py",  # the user's keys: `stage.<name>.rewards`
        "trainers/kto.py",  # KTO's KL term, in TRL's words ("the row's own reward")
        "trainers/online.py",  # the online kinds have the rewards capability
    ]


def test_a_trainer_kind_has_no_capability_flag_to_read():
    fields = {field.name for field in dataclasses.fields(TrainerKind)}
    assert not [flag for flag in FLAGS if flag in fields or hasattr(TrainerKind, flag)]


def test_the_core_reaches_a_planning_capability_only_through_a_kind():
    importing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(OWNERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            importing += [f"{relative}: {n}" for n in names if n in PLANNING_CAPABILITIES]
    assert importing == []


def test_the_planner_takes_every_step_for_every_stage_in_order_each_once(monkeypatch):
    steps = [step.__name__ for step in pipeline.STEPS]
    assert steps == [
        "decide_the_policy",
        "read_the_rows",
        "choose_the_trainer",
        "check_the_rows_fit",
        "plan_the_capabilities",
        "decide_packing_step",
        "decide_checkpointing",
        "place",
        "fit_the_dtype_to_the_cpu",
        "choose_kernels",
        "quantize_as_placed",
        "check_with_the_kind",
        "choose_the_loss",
        "check_the_held_out_rows",
        "decide_determinism_step",
        "settle_the_trainer",
        "estimate_the_memory",
    ]
    called: list[tuple[str, str]] = []

    def recorded(step):
        def call(draft):
            called.append((draft.name, step.__name__))
            return step(draft)

        return call

    monkeypatch.setattr(planner, "STEPS", tuple(recorded(step) for step in planner.STEPS))
    planned = plan("recipe=r8-distill-text")
    assert called == [(stage, step) for stage in planned.graph.order for step in steps]
