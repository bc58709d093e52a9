"""A frozen reference: the policy as it started, which a kind's loss compares the policy with.

- A LoRA policy's reference is its adapter-disabled base: no second model. TRL copies a fresh
  adapter as a "ref" adapter, which computes the same: `run` drops it on the built trainer.
- A full fine-tune's is a frozen copy of its starting weights, on the memory estimate beside the
  policy: given to the trainer as `ref_model` (DPO, KTO), or, for a trainer that reloads its
  reference itself by the name in the policy's config (GRPO, RLOO with `beta` above 0), that
  name pointed at the folder the starting weights were loaded from (never a hub name).
- Log-probs precomputed before training (`precompute_ref_log_probs`, DPO and KTO) need no copy.

`plan` checks what TRL would refuse of the reference settings once the model is loaded, and
says which reference the stage has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import (
    NOTHING,
    CapabilityPlan,
    DisabledAdapter,
    FrozenModel,
    InputRef,
    Load,
    NamedStart,
    StageFacts,
    StartingWeights,
)
from recipe_engine.errors import RecipeError

COPY = "reference model"


@dataclass(frozen=True)
class Reference:
    """`given`: the trainer takes the reference as `ref_model` (else it reloads it by name);
    `beta_default`: the trainer keeps a reference only where `beta` is not 0 (None: always)."""

    trainer_class: str
    given: bool = True
    beta_default: float | None = None
    name: str = "reference"
    sections: tuple[str, ...] = ()

    def check_config(
        self, stage: str, config: Mapping[str, Any], kind: str, having: Sequence[str]
    ) -> None:
        return None  # it has no keys of its own: `train`'s are its settings class's

    def inputs(self, stage: str, config: Mapping[str, Any]) -> dict[str, InputRef]:
        return {}  # the stage's own starting weights

    def plan(self, facts: StageFacts) -> CapabilityPlan:
        if not self.keeps(facts.train):
            return NOTHING
        precomputed = bool(facts.train.get("precompute_ref_log_probs"))
        if self.given:
            self._check_settings(facts, precomputed)
        copied = not facts.lora and not precomputed
        return CapabilityPlan(
            notes=self._notes(facts, precomputed) if self.given else (),
            frozen=(FrozenModel(COPY, facts.params, same_storage=True),) if copied else (),
            loads=self._loads(facts, copied),
        )

    def curves(self, logged: Sequence[str]) -> list[tuple[str, str]]:
        return []

    def code_from_elsewhere(self, setting: str, value: Any, root: Path) -> str | None:
        return None  # it names a stage, never code

    def keeps(self, train: Mapping[str, Any]) -> bool:
        """Whether a stage with these `train` keys compares with a frozen reference."""
        return self.beta_default is None or float(train.get("beta", self.beta_default)) != 0

    def _loads(self, facts: StageFacts, copied: bool) -> tuple[Load, ...]:
        if facts.lora:
            return (DisabledAdapter(),) if self.given else ()
        if not copied:
            return ()
        return (StartingWeights("ref_model"),) if self.given else (NamedStart(),)

    def _notes(self, facts: StageFacts, precomputed: bool) -> tuple[str, ...]:
        if facts.lora:
            return ("reference: the adapter-disabled base (the stage's starting weights, no copy)",)
        if precomputed:
            return ("reference: log-probs precomputed from the starting weights before training",)
        return (
            "reference: a frozen copy of the starting weights (in memory beside the policy; "
            f"LoRA on stage `{facts.name}` would use the adapter-disabled base instead)",
        )

    def _check_settings(self, facts: StageFacts, precomputed: bool) -> None:
        """What TRL's reference trainers (DPO, KTO) refuse of their reference settings once the
        model is loaded: a synced reference needs a reference model of its own (a LoRA policy
        has none: its reference is the adapter-disabled base) and live log-probs;
        precomputed log-probs need text rows (image rows are processed batch by batch)."""
        name, key = facts.name, f"stage.{facts.name}.train"
        synced = facts.train.get("sync_ref_model")
        if synced and facts.lora:
            raise RecipeError(
                f"`{key}.sync_ref_model=true` updates a reference model during training, but "
                f"stage `{name}` trains LoRA, whose reference is the adapter-disabled base: "
                f"TRL's {self.trainer_class} has no reference model to sync. Drop the key, or "
                f"train the stage in full (stage.{name}.lora=null).",
                key=f"{key}.sync_ref_model",
            )
        if synced and precomputed:
            raise RecipeError(
                f"`{key}.sync_ref_model=true` updates the reference during training, so "
                f"log-probs precomputed before it (`{key}.precompute_ref_log_probs=true`) would "
                "go stale. Set one of them to false.",
                key=f"{key}.precompute_ref_log_probs",
            )
        if precomputed and facts.images:
            raise RecipeError(
                f"`{key}.precompute_ref_log_probs=true` needs text rows: TRL's "
                f"{self.trainer_class} processes image rows batch by batch, never all up front. "
                "Drop the key (the reference then scores each batch as it comes).",
                key=f"{key}.precompute_ref_log_probs",
            )
