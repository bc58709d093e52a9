"""`trainer: rloo`: REINFORCE leave-one-out on prompts (TRL's RLOOTrainer).

As GRPO (`grpo.py`), but each answer's baseline is the mean reward of the other answers to
its prompt; TRL's default `beta` is 0.05, so a stage compares with a reference unless it sets
`beta: 0` (the reference as GRPO's).
"""

from __future__ import annotations

from recipe_engine.trainers.online import Defaults, online_kind

KIND = online_kind(
    name="rloo",
    settings_class="RLOOConfig",
    trainer_class="RLOOTrainer",
    rank=5,
    defaults=Defaults(num_generations=2, beta=0.05),
)
