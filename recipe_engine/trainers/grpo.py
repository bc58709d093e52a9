"""`trainer: grpo`: group relative policy optimisation on prompts (TRL's GRPOTrainer).

Each prompt is answered `num_generations` times; the stage's rewards (`stage.<name>.rewards`)
score every answer, and each answer's advantage is its reward against its group's. TRL's
default `beta` is 0: no reference model. With `beta` above 0 the reference is as DPO's: the
adapter-disabled base for a LoRA policy, the stage's starting weights for a full fine-tune.
Text prompts, chat prompts and prompts with images (a vision-language stage) all train.
"""

from __future__ import annotations

from recipe_engine.trainers.online import Defaults, online_kind

KIND = online_kind(
    name="grpo",
    settings_class="GRPOConfig",
    trainer_class="GRPOTrainer",
    rank=4,
    defaults=Defaults(num_generations=8, beta=0.0),
)
