"""The online kinds (GRPO, RLOO): their generation settings completed as TRL completes them,
the step count their dataloader gives, and what `plan` refuses of them before a weight loads."""

from __future__ import annotations

import dataclasses

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.rewards.capability import REWARDS
from recipe_engine.trainers import TRAINERS
from recipe_engine.trainers.kind import PROMPT_ROWS, StageFacts
from recipe_engine.trainers.online import generation

GRPO, RLOO = TRAINERS["grpo"], TRAINERS["rloo"]


def facts(train: dict, rows: int = 64, world_size: int = 1, device: str = "cpu") -> StageFacts:
    return StageFacts("grpo", train, rows, world_size, "prompts", None, device)


@pytest.mark.parametrize("kind", [GRPO, RLOO])
def test_the_kinds_defaults_are_their_settings_class_defaults(kind):
    import trl

    defaults = {f.name: f.default for f in dataclasses.fields(getattr(trl, kind.settings_class))}
    for name, value in dataclasses.asdict(kind.defaults).items():
        assert defaults[name] == value, name


@pytest.mark.parametrize(
    "train",
    [
        {"per_device_train_batch_size": 8, "num_generations": 4},
        {"per_device_train_batch_size": 4, "num_generations": 4, "gradient_accumulation_steps": 3},
        {"per_device_train_batch_size": 6, "num_generations": 3, "steps_per_generation": 2},
        {"per_device_train_batch_size": 4, "num_generations": 2, "generation_batch_size": 16},
        {"per_device_train_batch_size": 4, "num_generations": 4, "num_iterations": 2},
    ],
)
@pytest.mark.parametrize("samples", [16, 25])
def test_steps_are_the_batches_trls_sampler_yields(train, samples, tmp_path):
    """The planned batches against TRL's own: its settings class completes the generation
    settings, its `RepeatSampler` yields the indices one process's dataloader batches."""
    from trl import GRPOConfig
    from trl.trainer.utils import RepeatSampler

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **train)
    sampler = RepeatSampler(
        list(range(samples)),
        mini_repeat_count=args.num_generations,
        batch_size=args.generation_batch_size // args.num_generations,
        repeat_count=args.num_iterations * args.steps_per_generation,
    )
    batch = args.per_device_train_batch_size * args.steps_per_generation
    batches = len(sampler) // batch
    assert GRPO.batches_per_epoch(args, samples, 1) == batches
    per_epoch = max(-(-batches // args.gradient_accumulation_steps), 1)
    assert GRPO.planned_steps(facts(train, rows=samples)) == 3 * per_epoch  # 3 epochs
    planned = generation(train, 1, GRPO.defaults)
    assert planned.generation_batch == args.generation_batch_size
    assert planned.steps_per_generation == args.steps_per_generation


def test_prompts_are_the_online_kinds_rows_and_only_theirs():
    assert GRPO.rows == RLOO.rows == PROMPT_ROWS
    rewarded = [name for name, kind in TRAINERS.items() if REWARDS in kind.capabilities]
    assert rewarded == ["grpo", "rloo"]
    assert not GRPO.judged and not GRPO.preference and GRPO.images


def test_a_reference_is_kept_where_beta_is_not_zero():
    [grpo] = [c for c in GRPO.capabilities if c.name == "reference"]
    [rloo] = [c for c in RLOO.capabilities if c.name == "reference"]
    assert not grpo.keeps({}) and grpo.keeps({"beta": 0.04})
    assert rloo.keeps({}) and not rloo.keeps({"beta": 0.0})


def test_memory_terms_count_completions_and_the_generation_batch():
    train = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 32}
    assert GRPO.completion_tokens(train) == 32
    assert GRPO.generated_at_once(train, world_size=1) == 8
    assert GRPO.generated_at_once({**train, "steps_per_generation": 4}, world_size=2) == 32
    assert TRAINERS["sft"].generated_at_once(train, 1) == 0


@pytest.mark.parametrize(
    ("train", "rows", "expected"),
    [
        ({"num_generations": 1}, 64, "at least 2"),
        ({"per_device_train_batch_size": 6, "num_generations": 4}, 64, "multiple of 4"),
        ({"per_device_train_batch_size": 16, "num_generations": 2}, 4, "fewer than the 8"),
        ({"use_vllm": True}, 64, "vLLM"),
    ],
)
def test_plan_refuses_what_trl_would_fail_on_later(train, rows, expected):
    with pytest.raises(RecipeError, match=expected) as refused:
        GRPO.check_plan(facts(train, rows))
    assert refused.value.key.startswith("stage.grpo.train.")


def test_plan_says_how_the_stage_generates():
    train = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 16}
    GRPO.check_plan(facts(train))
    (note,) = GRPO.plan_notes(facts(train))
    # 64 prompts, 2 a generation batch: 32 steps an epoch, TRL's default 3 epochs
    assert "generation: 96 steps; 4 completions of up to 16 tokens per prompt" in note
    assert "2 prompt(s) (8 completions)" in note and "no reference (beta 0)" in note
    (note,) = RLOO.plan_notes(facts(train))
    assert "KL to the reference, beta 0.05" in note
