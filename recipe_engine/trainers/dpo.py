"""`trainer: dpo`: direct preference optimisation on pairs (TRL's DPOTrainer).

The reference: the adapter-disabled base for a LoRA policy (no second copy), the parent's
weights (a frozen copy) for a full fine-tune, or log-probs precomputed from them.
"""

from __future__ import annotations

from recipe_engine.capabilities.judged import JUDGED
from recipe_engine.capabilities.reference import Reference
from recipe_engine.trainers.kind import PREFERENCE_ROWS, Packing, TrainerKind

KIND = TrainerKind(
    name="dpo",
    settings_class="DPOConfig",
    module="trl",
    trainer_class="DPOTrainer",
    rows=PREFERENCE_ROWS,
    images=True,
    rank=1,
    packing=Packing.PADS,
    packing_note=(
        "padding_free: off: TRL 1.16's DPOTrainer pads its batches (padding-free is disabled "
        "there since its refactor), so the stage trains as without it"
    ),
    capabilities=(Reference("DPOTrainer"), JUDGED),
)
