"""`trainer: sft`: supervised fine-tuning on demonstrations (TRL's SFTTrainer).

The default: a stage whose rows are instructions (messages, or prompt / completion) trains
with it under `trainer: auto`, and a record written before trainers were a choice trained
with it. It packs rows, or runs them padding-free, where the model's attention keeps them
apart (`plan.packing`), and its loss flags choose which tokens count.
"""

from __future__ import annotations

from recipe_engine.trainers.kind import INSTRUCTION_ROWS, Packing, TrainerKind

KIND = TrainerKind(
    name="sft",
    settings_class="SFTConfig",
    module="trl",
    trainer_class="SFTTrainer",
    rows=INSTRUCTION_ROWS,
    images=True,
    rank=0,
    demonstrations=True,
    packing=Packing.SEPARATES_ROWS,
)
