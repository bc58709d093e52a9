"""What a trainer kind is: the one protocol every `trainers/<kind>.py` implements.

A kind is one TRL trainer with its own settings class (a stage's `train` keys are that
class's fields). What differs between kinds and matters to the engine is declared here, as
fields, or overridden, as methods: which rows it takes, whether it compares the policy with
a frozen reference or learns from a teacher, what it puts on the memory estimate, what
packing does for it, what its loss is called, what `plan` checks and says of a stage, and
the arguments its TRL trainer is built with. The layers read a stage's kind and never its
name, so the next kind is one module.

Pure: nothing heavy is imported here; `run` imports the trainer class by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

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
    PROMPT_ROWS: "prompts (a prompt, optionally images and the columns its rewards read)",
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
class LabelCounts:
    """How many training rows of unpaired feedback are labelled desirable (true) and
    undesirable (false)."""

    desirable: int
    undesirable: int


@dataclass(frozen=True)
class StageFacts:
    """What a kind's own plan checks read of a stage, as the plan has decided it."""

    name: str
    train: Mapping[str, Any]  # the stage's `train` keys (its settings class's fields)
    train_rows: int
    world_size: int
    rows: str  # the stage's rows as `plan` names them
    labels: LabelCounts | None = None  # unpaired feedback's labels; None: rows without labels
    device: str = "cpu"  # where the stage trains (placement): cuda | cpu | mps


@dataclass(frozen=True)
class TrainerKind:
    """One trainer: TRL's trainer and settings classes, and what it asks of rows and memory."""

    name: str  # `stage.<name>.trainer`
    settings_class: str  # the class `train` keys belong to (config.library_keys)
    module: str  # where TRL keeps the trainer and its settings class
    trainer_class: str
    rows: str  # INSTRUCTION_ROWS | PREFERENCE_ROWS | UNPAIRED_ROWS
    reference: bool  # scores the policy against a frozen reference model
    images: bool  # takes image rows (a vision-language stage's)
    # Where it is listed, and which kind `auto` gives a stage whose rows several kinds take
    # (the lowest).
    rank: int
    experimental: bool = False  # TRL ships it under trl.experimental (its API may change)
    # Its evaluate() reads only the rows it tokenized when it was built (ORPO's older
    # trainer), not raw rows: the held-out rows are taken from those.
    evaluates_tokenized: bool = False
    fused_head: bool = True  # TRL's fused LM head; False: it materializes the logits
    # Its loss is the next-token loss of demonstrations, with the loss flags that choose
    # which tokens count (completion_only_loss, assistant_only_loss); others name their loss.
    demonstrations: bool = False
    packing: Packing = Packing.NONE
    packing_note: str = ""  # Packing.PADS: what `plan` says when it drops `padding_free`
    estimates_kl: bool = False  # forms a KL term from mismatched pairs within each batch
    # Generates its own completions while it trains and learns from their rewards
    # (`stage.<name>.rewards`): an online kind, whose batches are counted in completions.
    online: bool = False
    # Its TRL trainer loads a full fine-tune's reference itself, from the name in the policy's
    # config (`config._name_or_path`), rather than taking one: the engine points that name at
    # the folder the stage's starting weights were loaded from, never at a hub name.
    reloads_reference: bool = False
    # Learns from a teacher model's next-token distributions (`stage.<name>.teacher`, another
    # stage's weights): `plan` orders the teacher first, keys the stage by it, and `run` loads
    # it frozen beside the policy.
    teacher: bool = False

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

    def trainer_arguments(
        self, reference: object, rewards: list[object], teacher: object = None
    ) -> dict[str, object]:
        """What its TRL trainer takes besides the model, settings, rows, processor and
        callbacks: the frozen reference (None: the adapter-disabled base) where it has one;
        the frozen teacher model where the kind learns from one."""
        return {"ref_model": reference} if self.reference else {}

    def keeps_reference(self, train: Mapping[str, Any]) -> bool:
        """Whether a stage with these `train` keys compares with a frozen reference model."""
        return self.reference

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
