"""What a trainer kind is: the one protocol every `trainers/<kind>.py` implements.

A kind is one TRL trainer with its own settings class (a stage's `train` keys are that
class's fields). What differs between kinds and matters to the engine is declared here, as
fields, or overridden, as methods: which rows it takes, what it puts on the memory estimate,
what packing does for it, what its loss is called, what `plan` checks and says of a stage,
how many batches an epoch is; and what it adds beyond its rows, as the capabilities it lists
(`capabilities`: a reference, a teacher, rewards), each of which owns what it adds. The
layers read a stage's kind and its capabilities, never its name, so the next kind is one
module.

Pure: nothing heavy is imported here; `run` imports the trainer class by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from recipe_engine.capabilities import Capability, LabelCounts, StageFacts

__all__ = ["Capability", "LabelCounts", "StageFacts", "TrainerKind"]

# Rows a trainer takes: instruction rows (messages, prompt / completion), preference pairs
# (prompt / chosen / rejected), unpaired feedback (prompt / completion / label), or prompts
# alone (an online kind answers them itself and its rewards score the answers).
INSTRUCTION_ROWS, PREFERENCE_ROWS, UNPAIRED_ROWS = "instruction", "preference", "unpaired"
PROMPT_ROWS = "prompt"
ROW_KINDS = (INSTRUCTION_ROWS, PREFERENCE_ROWS, UNPAIRED_ROWS, PROMPT_ROWS)
# What each kind of rows is, in the words a refusal uses.
ROWS_IN_WORDS = {
    INSTRUCTION_ROWS: "instruction rows (messages, prompt / completion, or language-modeling text)",
    PREFERENCE_ROWS: "preference pairs (prompt / chosen / rejected)",
    UNPAIRED_ROWS: "unpaired feedback (prompt / completion / label)",
    PROMPT_ROWS: "prompts (a prompt, optionally images, and other columns as written)",
}


class Packing(Enum):
    """What `packing` / `padding_free` do for a kind's trainer (`plan.packing` decides)."""

    # Packs rows, or runs them padding-free, where the model's attention keeps them apart.
    SEPARATES_ROWS = "separates rows"
    # Takes `padding_free` but pads its batches anyway: the key is dropped with the kind's note.
    PADS = "pads"
    # Has neither key (its settings class refuses them).
    NONE = "none"


@dataclass(frozen=True)
class TrainerKind:
    """One trainer: TRL's trainer and settings classes, and what it asks of rows and memory."""

    name: str  # `stage.<name>.trainer`
    settings_class: str  # the class `train` keys belong to (config.library_keys)
    module: str  # where TRL keeps the trainer and its settings class
    trainer_class: str
    rows: str  # INSTRUCTION_ROWS | PREFERENCE_ROWS | UNPAIRED_ROWS | PROMPT_ROWS
    images: bool  # takes image rows (a vision-language stage's)
    # Where it is listed, and which kind `auto` gives a stage whose rows several kinds take
    # (the lowest).
    rank: int
    experimental: bool = False  # TRL ships it under trl.experimental (its API may change)
    fused_head: bool = True  # TRL's fused LM head; False: it materializes the logits
    # Its loss is the next-token loss of demonstrations, with the loss flags that choose
    # which tokens count (completion_only_loss, assistant_only_loss); others name their loss.
    demonstrations: bool = False
    packing: Packing = Packing.NONE
    packing_note: str = ""  # Packing.PADS: what `plan` says when it drops `padding_free`
    # What it adds beyond its rows, each owning its keys, checks, key parts, memory and loads.
    capabilities: tuple[Capability, ...] = ()

    @property
    def preference(self) -> bool:
        """Learns from preference pairs (prompt / chosen / rejected)."""
        return self.rows == PREFERENCE_ROWS

    @property
    def judged(self) -> bool:
        """Learns from judged answers (pairs, or completions labelled desirable or not) rather
        than from demonstrations: judged by `compare` on its rows."""
        return self.rows in (PREFERENCE_ROWS, UNPAIRED_ROWS)

    @property
    def sequences_per_row(self) -> int:
        """Sequences a row puts through the model with gradients: a pair's two answers."""
        return 2 if self.preference else 1

    @property
    def loss_label(self) -> str:
        """What its loss is called where it is not the demonstrations' ("dpo loss")."""
        return "" if self.demonstrations else f"{self.name} loss"

    def check_plan(self, stage: StageFacts) -> None:
        """What this kind refuses of a stage before a weight loads (RecipeError): none."""

    def plan_notes(self, stage: StageFacts) -> list[str]:
        """What `plan` says of a stage of this kind beside its reference: nothing."""
        return []

    def preflight_step(self, trainer: Any, model: Any, batch: Any) -> Any:
        """One forward and backward on a training batch before step 0, as its trainer's
        training step computes its loss: by default the trainer's `compute_loss`. A kind whose
        trainer computes it in its own `training_step` (generating first) runs that."""
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        return loss

    def evaluate(self, trainer: Any, held_out: Any) -> dict[str, float]:
        """Its trainer's own evaluation of the held-out rows, after training (a loss, and for a
        preference kind its implicit reward's metrics; {}: none)."""
        if getattr(trainer.args, "precompute_ref_log_probs", False):
            # The reference's log-probs of the held-out rows were computed when the trainer was
            # built; a full fine-tune keeps no reference to score rows given after training,
            # and TRL's DPO and KTO trainers refuse them. The same rows, as prepared then.
            prepared = trainer.eval_dataset
            trainer.eval_dataset = prepared.select(range(min(len(held_out), len(prepared))))
            try:
                return trainer.evaluate()
            finally:
                trainer.eval_dataset = prepared
        return trainer.evaluate(held_out)

    def completion_tokens(self, train: Mapping[str, Any]) -> int:
        """Tokens a row's sequence gains beyond the row's own: an online kind's answers."""
        return 0

    def generated_at_once(self, train: Mapping[str, Any], world_size: int) -> int:
        """Completions one process generates at once (0: the kind generates none)."""
        return 0

    def batches_per_epoch(self, settings: Any, samples: int, world_size: int) -> int:
        """The batches one process's training dataloader yields in an epoch of `samples`
        rows under `settings` (the built settings object): a last short batch is dropped
        under `dataloader_drop_last`."""
        batch = settings.per_device_train_batch_size
        if getattr(settings, "dataloader_drop_last", False):
            return math.ceil(samples / world_size) // batch
        return math.ceil(samples / (batch * world_size))
