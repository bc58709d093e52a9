"""An online stage's rewards, decided and checked before a weight loads.

A stage whose trainer generates (`TrainerKind.online`) needs at least one reward; each is found
and called as TRL will on a few of the stage's own rows (`rewards.check_on_rows`), so a reward
that does not exist, takes other arguments, or returns the wrong count, NaN or text is one
message here rather than an error at the first generation. Their weights become TRL's
`reward_weights` among the `train` keys; a stage of another kind refuses rewards (it has no
completions to score).
"""

from __future__ import annotations

import dataclasses

from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.inputs import Rows
from recipe_engine.rewards import Reward, check_on_rows, planned_rewards
from recipe_engine.trainers import TRAINERS

SAMPLE_ROWS = 2  # training rows each reward is called on


def plan_rewards(
    name: str, stage: StageConfig, rows: Rows
) -> tuple[StageConfig, tuple[Reward, ...]]:
    """The stage with its rewards' weights among its `train` keys, and its rewards."""
    kind = TRAINERS.get(stage.trainer)
    key = f"stage.{name}.rewards"
    if stage.evaluate_only or kind is None or not kind.online:
        if stage.rewards:
            online = [k.name for k in TRAINERS.values() if k.online]
            raise RecipeError(
                f"`{key}` is set, but stage `{name}` trains with {stage.trainer}, which "
                f"generates nothing to score. Rewards drive the online trainers "
                f"({', '.join(online)}): drop the key or set stage.{name}.trainer.",
                key=key,
            )
        return stage, ()
    if not stage.rewards:
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name}, which learns from the rewards of the "
            f"completions it generates, but `{key}` is empty. Add one: "
            f"`{key}: [{{name: exact_match}}]` scores each answer against the rows' `answer` "
            "column; `{fn: my_module:my_reward}` is your own function.",
            key=key,
        )
    if "reward_weights" in stage.train:
        raise RecipeError(
            f"`stage.{name}.train.reward_weights` is set; each reward's weight is its entry's "
            f"`weight` in `{key}`. Drop the train key.",
            key=f"stage.{name}.train.reward_weights",
        )
    rewards = planned_rewards(name, stage.rewards)
    train = rows.splits().train
    sample = [train[i] for i in range(min(SAMPLE_ROWS, len(train)))]
    for reward in rewards:
        check_on_rows(name, reward, sample)
    weights = [reward.weight for reward in rewards]
    return dataclasses.replace(stage, train={**stage.train, "reward_weights": weights}), rewards


def rewards_note(rewards: tuple[Reward, ...]) -> list[str]:
    """`plan`'s line on the rewards, where the stage has any."""
    if not rewards:
        return []
    each = ", ".join(f"{r.label} x{r.weight:g}" for r in rewards)
    return [f"rewards: {each} (checked on the stage's rows; their code enters the key)"]
