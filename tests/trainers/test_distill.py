"""The distilling kind: prompts as TRL's DistillationTrainer takes them, the teacher passed as
`teacher_model`, the step count its dataloader gives, and what `plan` refuses of it."""

from __future__ import annotations

import dataclasses

import pytest

from recipe_engine.capabilities.teacher import TEACHER
from recipe_engine.errors import RecipeError
from recipe_engine.trainers import TRAINERS, trainer_for
from recipe_engine.trainers.distill import DEFAULTS, generation_batch
from recipe_engine.trainers.kind import PROMPT_ROWS, StageFacts

DISTILL = TRAINERS["distill"]


def facts(train: dict, rows: int = 64, world_size: int = 1) -> StageFacts:
    return StageFacts("distill", train, rows, world_size, "prompts", None, "cpu")


def test_the_kinds_defaults_are_its_settings_class_defaults():
    import trl

    defaults = {f.name: f.default for f in dataclasses.fields(trl.DistillationConfig)}
    for name, value in dataclasses.asdict(DEFAULTS).items():
        assert defaults[name] == value, name


def test_it_learns_from_a_teacher_on_prompts_and_auto_never_chooses_it():
    assert DISTILL.capabilities == (TEACHER,) and DISTILL.rows == PROMPT_ROWS
    assert not DISTILL.judged
    assert [name for name, kind in TRAINERS.items() if TEACHER in kind.capabilities] == ["distill"]
    assert trainer_for(PROMPT_ROWS) != "distill"  # prompts alone call for an online kind
    assert TEACHER.argument == "teacher_model"  # what run hands TRL's DistillationTrainer


@pytest.mark.parametrize(
    "train",
    [
        {"per_device_train_batch_size": 4},
        {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3},
        {"per_device_train_batch_size": 5, "gradient_accumulation_steps": 2},
    ],
)
@pytest.mark.parametrize("samples", [16, 25])
def test_steps_are_the_batches_trls_sampler_yields(train, samples, tmp_path):
    """The planned batches against TRL's own: its `RepeatSampler` yields the indices one
    process's dataloader batches in `per_device_train_batch_size x accumulation` prompts."""
    from trl import DistillationConfig
    from trl.trainer.utils import RepeatSampler

    args = DistillationConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **train)
    accumulation = args.gradient_accumulation_steps
    sampler = RepeatSampler(
        list(range(samples)),
        mini_repeat_count=1,
        batch_size=args.per_device_train_batch_size * accumulation,
        repeat_count=accumulation,
    )
    batch = args.per_device_train_batch_size * accumulation
    assert DISTILL.batches_per_epoch(args, samples, 1) == len(sampler) // batch
    assert generation_batch(train, 1) == batch


def test_a_generation_batch_larger_than_the_prompts_is_refused():
    DISTILL.check_plan(facts({"per_device_train_batch_size": 16}, rows=16))
    with pytest.raises(RecipeError) as refused:
        DISTILL.check_plan(facts({"per_device_train_batch_size": 16}, rows=15))
    assert refused.value.key == "stage.distill.train.per_device_train_batch_size"
    assert "would train no step" in str(refused.value)


def test_memory_terms_count_the_completion_and_the_generation_batch():
    train = {"per_device_train_batch_size": 8, "max_completion_length": 32}
    assert DISTILL.completion_tokens(train) == 32
    assert DISTILL.generated_at_once(train, world_size=2) == 8
    assert DISTILL.completion_tokens({}) == DEFAULTS.max_completion_length
    notes = DISTILL.plan_notes(facts({"beta": 0.5}))
    assert "JSD, beta 0.5" in notes[0] and "no reference model" in notes[0]
