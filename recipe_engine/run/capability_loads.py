"""What a stage's capabilities load beside its model (`StagePlan.loads`), by the trainer's
argument names: another stage's weights frozen (a teacher), the starting weights again frozen
(a full fine-tune's reference), functions loaded by content (rewards), and the name the
trainer reloads its reference by."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from recipe_engine.capabilities import (
    DisabledAdapter,
    FromStage,
    Functions,
    NamedStart,
    StartingWeights,
)
from recipe_engine.plan.recipe_plan import QuantPlan, RecipePlan, StagePlan
from recipe_engine.run.loading import Weights, load_input_stage, load_stage_model, starting_folder
from recipe_engine.run.policies import bnb_config
from recipe_engine.run.seeding import seed_stage
from recipe_engine.run.trainer import TrainerParts
from recipe_engine.store.store import Store


@dataclass(frozen=True)
class CapabilityLoads:
    """One stage's loads, from the weights it started from."""

    plan: RecipePlan
    stage: StagePlan
    weights: Weights
    store: Store
    quantization: QuantPlan | None  # the stage's, as its policy was completed at load time

    def into(self, parts: TrainerParts) -> TrainerParts:
        """The trainer's parts with what the loads add: the trainer's extra arguments, and
        whether its reference is the policy with its adapter disabled (checked once built)."""
        return dataclasses.replace(
            parts,
            added=self._arguments(parts.model),
            adapter_reference=any(isinstance(load, DisabledAdapter) for load in self.stage.loads),
        )

    def _arguments(self, model: Any) -> dict[str, Any]:
        """By the trainer's argument names; `model` (the stage's own) is named as the trainer
        reloads its reference where a load says so."""
        added: dict[str, Any] = {}
        for load in self.stage.loads:
            if isinstance(load, FromStage):
                source = self.plan.stages[load.stage]
                added[load.argument] = load_input_stage(
                    self.plan, self.stage, source, load.role, self.store
                )
            elif isinstance(load, StartingWeights):
                added[load.argument] = self._frozen_start()
            elif isinstance(load, Functions):
                added[load.argument] = [function.load() for function in load.functions]
            elif isinstance(load, NamedStart):
                # The trainer reloads its reference by this name: the weights the stage started
                # from, from the folder they were loaded from (a hub name would load whatever
                # the hub has now).
                model.config._name_or_path = starting_folder(self.weights, self.stage.init.revision)
        return added

    def _frozen_start(self) -> Any:
        """The stage's starting weights loaded again, frozen (a full fine-tune's reference)."""
        quant = self.quantization
        seed_stage(self.stage)
        reference = load_stage_model(self.stage, self.weights, bnb_config(quant) if quant else None)
        reference.eval()
        reference.requires_grad_(False)
        return reference
