"""Rewards as a capability of a kind that generates (GRPO, RLOO): the stage's
`stage.<name>.rewards` score the completions it generates while it trains.

A stage of such a kind needs at least one reward; each is found and called as TRL will on a
few of the stage's own rows (`check_on_rows`), so a reward that does not exist, takes other
arguments, or returns the wrong count, NaN or text is one message in `plan` rather than an
error at the first generation. Their weights become TRL's `reward_weights` among the `train`
keys; what each calls (its module's source too) enters the stage key, and is what a node of a
cluster must find; `run` loads them by content and hands them to the trainer as
`reward_funcs`; TRL logs each as `rewards/<name>/mean`, which the web view draws. A stage of
another kind refuses rewards: it has no completions to score.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import (
    CapabilityPlan,
    Functions,
    InputRef,
    StageCode,
    StageFacts,
)
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.rewards import Reward, check_on_rows, planned_rewards
from recipe_engine.rewards.builtin import BUILTIN
from recipe_engine.user_code import code_outside

SECTION = "rewards"
# TRL's online trainers log each reward's mean per logging step under this key.
EACH = re.compile(r"rewards/(.+)/mean")
SAMPLE_ROWS = 2  # training rows each reward is called on


@dataclass(frozen=True)
class Rewards:
    name: str = SECTION
    sections: tuple[str, ...] = (SECTION,)

    def check_config(
        self, stage: str, config: Mapping[str, Any], kind: str, having: Sequence[str]
    ) -> None:
        """Rewards where the stage's trainer generates, and only there; none missing."""
        key, given = f"stage.{stage}.{SECTION}", config.get(SECTION) or []
        generates = kind in having and not config.get("evaluate_only")
        if given and not generates and kind != "auto":
            raise RecipeError(
                f"`{key}` is set, but stage `{stage}` trains with {kind}, which generates "
                f"nothing to score. Rewards drive the online trainers ({', '.join(having)}): "
                f"drop the key or set stage.{stage}.trainer.",
                key=key,
            )
        if generates and not given:
            raise RecipeError(
                f"Stage `{stage}` trains with {kind}, which learns from the rewards of the "
                f"completions it generates, but `{key}` is empty. Add one: "
                f"`{key}: [{{name: exact_match}}]` scores each answer against the rows' `answer` "
                "column; `{fn: my_module:my_reward}` is your own function.",
                key=key,
            )
        if generates and "reward_weights" in (config.get("train") or {}):
            raise RecipeError(
                f"`stage.{stage}.train.reward_weights` is set; each reward's weight is its "
                f"entry's `weight` in `{key}`. Drop the train key.",
                key=f"stage.{stage}.train.reward_weights",
            )

    def inputs(self, stage: str, config: Mapping[str, Any]) -> dict[str, InputRef]:
        return {}

    def plan(self, facts: StageFacts) -> CapabilityPlan:
        rewards = planned_rewards(facts.name, facts.config.get(SECTION) or [])
        sample = facts.sample(SAMPLE_ROWS)
        for reward in rewards:
            check_on_rows(facts.name, reward, sample)
        each = ", ".join(f"{r.label} x{r.weight:g}" for r in rewards)
        return CapabilityPlan(
            train={"reward_weights": [reward.weight for reward in rewards]},
            notes=(f"{SECTION}: {each} (checked on the stage's rows; their code enters the key)",),
            key={SECTION: [_settings(reward) for reward in rewards]},
            code=tuple(
                StageCode(r.key, r.target, r.source_digest) for r in rewards if not r.builtin
            ),
            loads=(Functions("reward_funcs", rewards),),
            planned=rewards,
        )

    def curves(self, logged: Sequence[str]) -> list[tuple[str, str]]:
        """The mean reward, and each reward's mean (TRL logs them as `rewards/<name>/mean`)."""
        each = [(f"reward {m[1]}", key) for key in logged if (m := EACH.fullmatch(key))]
        return [("mean reward", "reward"), *each] if "reward" in logged or each else []

    def code_from_elsewhere(self, setting: str, value: Any, root: Path) -> str | None:
        """A reward's `fn` outside `root`, or a `name` the engine does not ship (a plug-in's
        is code from elsewhere)."""
        leaf = setting.rpartition(".")[2]
        if value is None:
            return None
        if leaf == "fn":
            reason = code_outside(str(value), root)
            return f"reward function {reason}" if reason else None
        if leaf == "name" and str(value) not in BUILTIN:
            return f"reward `{value}` is not one the engine ships ({', '.join(BUILTIN)})"
        return None


def _settings(reward: Reward) -> JsonObject:
    """What decides a reward's scores: what it calls (its module's source too), its weight and
    options; not its name in the logs."""
    return {
        "target": reward.target,
        "weight": reward.weight,
        "options": dict(reward.options),
        "source": reward.source_digest,
    }


REWARDS = Rewards()
