"""`trainer: orpo`: odds-ratio preference optimisation on pairs (TRL's ORPOTrainer).

No reference model. TRL 1.16 keeps it in trl.experimental, tokenizes text only, evaluates
only the rows it tokenized when it was built, and materializes the logits (no fused head).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recipe_engine.capabilities.judged import JUDGED
from recipe_engine.trainers.kind import PREFERENCE_ROWS, StageFacts, TrainerKind


@dataclass(frozen=True)
class ORPOKind(TrainerKind):
    """A preference kind whose loss needs no reference: `plan` says so."""

    def plan_notes(self, stage: StageFacts) -> list[str]:
        return ["reference: none (reference-free loss)"]

    def evaluate(self, trainer: Any, held_out: Any) -> dict[str, float]:
        """Its evaluate() reads only the rows it tokenized when it was built, not raw rows:
        the held-out rows are taken from those."""
        return trainer.evaluate(trainer.eval_dataset.select(range(len(held_out))))


KIND = ORPOKind(
    name="orpo",
    settings_class="ORPOConfig",
    module="trl.experimental.orpo",
    trainer_class="ORPOTrainer",
    rows=PREFERENCE_ROWS,
    images=False,
    rank=2,
    experimental=True,
    fused_head=False,
    capabilities=(JUDGED,),
)
