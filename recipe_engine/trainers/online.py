"""What online kinds share (`grpo`, `rloo`): they answer each prompt several times while they
train, score the answers with the stage's rewards and learn from the scores.

TRL's online trainers count their batches in completions: a per-device batch of
`per_device_train_batch_size` completions is a slice of a generation batch of
`generation_batch_size` completions (`num_generations` per prompt), generated once every
`steps_per_generation` batches and reused `num_iterations` times (TRL's `RepeatSampler`). So
the step count, the generation batch's divisibility and the memory of generating are their own,
and `plan` decides them here from the stage's keys and the defaults of TRL's settings class
(`Defaults`, which a test compares with the installed class).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.capabilities.reference import Reference
from recipe_engine.errors import RecipeError
from recipe_engine.rewards.capability import REWARDS
from recipe_engine.trainers.kind import PROMPT_ROWS, StageFacts, TrainerKind


@dataclass(frozen=True)
class Defaults:
    """The settings class's defaults of the keys `plan` counts with."""

    num_generations: int
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 512
    num_iterations: int = 1
    beta: float = 0.0
    num_train_epochs: float = 3.0
    max_steps: int = -1


@dataclass(frozen=True)
class Generation:
    """How a stage's prompts are answered while it trains, as its keys decide."""

    num_generations: int
    batch: int  # per-device completions a step's loss takes
    generation_batch: int  # completions generated at once (all processes)
    steps_per_generation: int
    num_iterations: int
    max_completion_length: int

    @property
    def prompts_per_generation(self) -> int:
        return self.generation_batch // self.num_generations


def generation(train: Mapping[str, Any], world_size: int, defaults: Defaults) -> Generation:
    """The stage's generation settings, completed as TRL's settings class completes them
    (`GRPOConfig.__post_init__`): the generation batch from the steps per generation (default:
    the accumulation steps) or the steps from the batch."""
    batch = int(train.get("per_device_train_batch_size", defaults.per_device_train_batch_size))
    steps = train.get("steps_per_generation")
    generation_batch = train.get("generation_batch_size")
    if generation_batch is None:
        accumulation = defaults.gradient_accumulation_steps
        steps = int(steps or train.get("gradient_accumulation_steps", accumulation))
        generation_batch = batch * world_size * steps
    else:
        steps = int(generation_batch) // (batch * world_size)
    return Generation(
        num_generations=int(train.get("num_generations", defaults.num_generations)),
        batch=batch,
        generation_batch=int(generation_batch),
        steps_per_generation=steps,
        num_iterations=int(train.get("num_iterations", defaults.num_iterations)),
        max_completion_length=int(
            train.get("max_completion_length", defaults.max_completion_length)
        ),
    )


def vllm_missing_reason(device: str) -> str | None:
    """Why `use_vllm` cannot run here (None: it can): TRL's colocated vLLM needs the package
    and a CUDA device."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install vllm; TRL's `use_vllm` generates with it)"
    if device != "cuda":
        return f"vLLM generates on CUDA GPUs only, and this stage runs on {device}"
    return None


def check_prompts_fill_a_batch(stage: StageFacts, prompts: int, counted: str = "") -> None:
    """A stage whose trainer generates for `prompts` prompts at once (`counted`: how they are
    counted, for the message) has at least that many training prompts, or trains no step."""
    if prompts > stage.train_rows:
        key = f"stage.{stage.name}.train.per_device_train_batch_size"
        raise RecipeError(
            f"Stage `{stage.name}` has {stage.train_rows} training prompt(s), fewer than the "
            f"{prompts} one generation batch takes{counted}, so it would train no step. Add "
            f"rows or lower {key}.",
            key=key,
        )


def check_vllm(stage: StageFacts) -> None:
    """`use_vllm` only where TRL's colocated vLLM can run."""
    reason = vllm_missing_reason(stage.device) if stage.train.get("use_vllm") else None
    if reason is not None:
        key = f"stage.{stage.name}.train.use_vllm"
        raise RecipeError(
            f"`{key}` is true, but {reason}. Drop the key: the stage then generates with "
            "transformers' `generate`.",
            key=key,
        )


@dataclass(frozen=True)
class OnlineKind(TrainerKind):
    """A kind that generates completions while it trains and learns from their rewards."""

    defaults: Defaults = Defaults(num_generations=8)

    def check_plan(self, stage: StageFacts) -> None:
        planned = generation(stage.train, stage.world_size, self.defaults)
        key = f"stage.{stage.name}.train"
        if planned.num_generations < 2:
            raise RecipeError(
                f"`{key}.num_generations` is {planned.num_generations}: {self.name} compares "
                "each completion with the others of its prompt, so it needs at least 2. Set "
                f"{key}.num_generations=2 or more.",
                key=f"{key}.num_generations",
            )
        if planned.generation_batch % planned.num_generations:
            raise RecipeError(
                f"Stage `{stage.name}` generates {planned.generation_batch} completions at once "
                f"(per_device_train_batch_size {planned.batch} x {stage.world_size} process(es) x "
                f"{planned.steps_per_generation} steps per generation), which is not a multiple "
                f"of num_generations={planned.num_generations}: every prompt's completions must "
                f"be in one generation batch. Set {key}.per_device_train_batch_size (or "
                f"{key}.generation_batch_size) to a multiple of {planned.num_generations}.",
                key=f"{key}.per_device_train_batch_size",
            )
        check_prompts_fill_a_batch(stage, planned.prompts_per_generation)
        check_vllm(stage)

    def planned_steps(self, stage: StageFacts) -> int:
        """The steps the stage trains: `max_steps`, or its epochs of the batches TRL's sampler
        yields (`batches_per_epoch`), as the run checks the built trainer's count."""
        train, defaults = stage.train, self.defaults
        if int(train.get("max_steps", defaults.max_steps)) > 0:
            return int(train.get("max_steps", defaults.max_steps))
        planned = generation(train, stage.world_size, defaults)
        groups = stage.train_rows // planned.prompts_per_generation
        batches = groups * planned.num_iterations * planned.steps_per_generation
        accumulation = int(
            train.get("gradient_accumulation_steps", defaults.gradient_accumulation_steps)
        )
        per_epoch = max(math.ceil(batches / accumulation), 1)
        return math.ceil(
            float(train.get("num_train_epochs", defaults.num_train_epochs)) * per_epoch
        )

    def plan_notes(self, stage: StageFacts) -> list[str]:
        planned = generation(stage.train, stage.world_size, self.defaults)
        beta = float(stage.train.get("beta", self.defaults.beta))
        reference = f"KL to the reference, beta {beta:g}" if beta else "no reference (beta 0)"
        return [
            f"generation: {self.planned_steps(stage)} steps; {planned.num_generations} "
            "completions of up to "
            f"{planned.max_completion_length} tokens per prompt, "
            f"{planned.prompts_per_generation} prompt(s) ({planned.generation_batch} "
            f"completions) generated every {planned.steps_per_generation} step(s), "
            f"used {planned.num_iterations} time(s); {reference}"
        ]

    def completion_tokens(self, train: Mapping[str, Any]) -> int:
        return generation(train, 1, self.defaults).max_completion_length

    def generated_at_once(self, train: Mapping[str, Any], world_size: int) -> int:
        planned = generation(train, world_size, self.defaults)
        return planned.generation_batch // world_size

    def batches_per_epoch(self, settings: Any, samples: int, world_size: int) -> int:
        """TRL's `RepeatSampler`: whole groups of `generation_batch_size / num_generations`
        prompts (a last partial one is dropped), each group's completions taken in
        `steps_per_generation` batches and reused `num_iterations` times."""
        prompts = settings.generation_batch_size // settings.num_generations
        groups = samples // prompts
        return groups * settings.num_iterations * settings.steps_per_generation


def online_kind(
    name: str, settings_class: str, trainer_class: str, rank: int, defaults: Defaults
) -> OnlineKind:
    """An online kind of TRL's: it learns from the stage's rewards, on prompts (text, chat or
    with images), with a reference where its `beta` is not 0 (TRL reloads it by name)."""
    reference = Reference(trainer_class, given=False, beta_default=defaults.beta)
    return OnlineKind(
        name=name,
        settings_class=settings_class,
        module="trl",
        trainer_class=trainer_class,
        rows=PROMPT_ROWS,
        images=True,
        rank=rank,
        defaults=defaults,
        capabilities=(REWARDS, reference),
    )
