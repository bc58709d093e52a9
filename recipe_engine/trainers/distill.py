"""`trainer: distill`: on-policy distillation from a teacher stage (TRL's DistillationTrainer).

Rows: prompts (`prompts` format, as GRPO's). TRL 1.16's DistillationTrainer documents its
`train_dataset` as "It must include a column `prompt`" (plain text or chat messages) and is
on-policy only: the student answers every prompt itself (one completion, up to
`max_completion_length` tokens) and is trained to match the teacher's next-token distribution
over that completion, under the generalized Jensen-Shannon divergence (`beta`: 0 forward KL,
0.5 JSD, 1 reverse KL, TRL's default). It has no `lmbda` (no mix with the rows' own
completions), so prompt / completion rows would only lose their completions: the kind takes
the rows it learns from, prompts. Other columns (an `answer`) pass through untouched and are
what the held-out exact match is scored against.

The teacher is `stage.<name>.teacher.from_stage`: another stage of the recipe, trained first,
whose weights (merged, where it trained an adapter) `run` loads frozen in eval mode and passes
as `teacher_model`. It must share the student's tokenizer (TRL compares full next-token
distributions, over one vocabulary): `plan` refuses one that does not. No reference model and
no rewards.

Batches: TRL's `RepeatSampler` takes a generation batch of `per_device_train_batch_size x
processes x gradient_accumulation_steps` prompts (a last partial one is dropped), generates
once for it and spends it over the accumulation steps: an epoch is one optimizer step a whole
generation batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.capabilities.teacher import TEACHER
from recipe_engine.trainers.kind import PROMPT_ROWS, StageFacts, TrainerKind
from recipe_engine.trainers.online import check_prompts_fill_a_batch, check_vllm


@dataclass(frozen=True)
class Defaults:
    """DistillationConfig's defaults of the keys `plan` counts with (a test compares them)."""

    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 512
    beta: float = 1.0
    temperature: float = 1.0


DEFAULTS = Defaults()


def _key(train: Mapping[str, Any], name: str) -> Any:
    return train.get(name, getattr(DEFAULTS, name))


def generation_batch(train: Mapping[str, Any], world_size: int) -> int:
    """Prompts generated for at once, over all processes (one completion each)."""
    batch = int(_key(train, "per_device_train_batch_size"))
    return batch * world_size * int(_key(train, "gradient_accumulation_steps"))


@dataclass(frozen=True)
class DistillKind(TrainerKind):
    """A kind whose student answers prompts and learns the teacher's distribution over them."""

    def check_plan(self, stage: StageFacts) -> None:
        counted = (
            f" (per_device_train_batch_size x {stage.world_size} process(es) x "
            "gradient_accumulation_steps)"
        )
        check_prompts_fill_a_batch(stage, generation_batch(stage.train, stage.world_size), counted)
        check_vllm(stage)

    def plan_notes(self, stage: StageFacts) -> list[str]:
        beta = float(_key(stage.train, "beta"))
        divergence = {0.0: "forward KL", 0.5: "JSD", 1.0: "reverse KL"}.get(beta, "generalized JSD")
        return [
            f"distillation: the student answers each prompt once (up to "
            f"{_key(stage.train, 'max_completion_length')} tokens), "
            f"{generation_batch(stage.train, stage.world_size)} prompt(s) a generation batch, "
            f"and matches the teacher's next-token distribution on its answer ({divergence}, "
            f"beta {beta:g}); no reference model"
        ]

    def completion_tokens(self, train: Mapping[str, Any]) -> int:
        return int(_key(train, "max_completion_length"))

    def generated_at_once(self, train: Mapping[str, Any], world_size: int) -> int:
        return generation_batch(train, world_size) // world_size

    def batches_per_epoch(self, settings: Any, samples: int, world_size: int) -> int:
        """TRL's `RepeatSampler`: whole generation batches of prompts (a last partial one is
        dropped), each yielded `gradient_accumulation_steps` times in batches of
        `per_device_train_batch_size x gradient_accumulation_steps` prompts a process."""
        accumulation = settings.gradient_accumulation_steps
        prompts = settings.per_device_train_batch_size * world_size * accumulation
        return (samples // prompts) * accumulation


KIND = DistillKind(
    name="distill",
    settings_class="DistillationConfig",
    module="trl",
    trainer_class="DistillationTrainer",
    rows=PROMPT_ROWS,
    images=False,
    rank=6,
    capabilities=(TEACHER,),
)
