"""`trainer: kto`: Kahneman-Tversky optimisation on unpaired feedback (TRL's KTOTrainer).

One completion per row, labelled desirable or not; the reference as DPO's. TRL's KTOTrainer
(trl/trainer/kto_trainer.py) estimates the KL term of its loss from mismatched prompt /
completion pairs: when it tokenizes the rows it rotates the completions by one inside each
run of `per_device_train_batch_size` rows ((x1, y1) ... (xn, yn) -> (x1, yn), (x2, y1) ...),
and reads the rows in that order (`train_sampling_strategy: sequential`). So, checked before
a weight loads:

- a per-device batch of one row pairs each prompt with its own completion: TRL refuses it
  ("the KL term will be equivalent to the implied reward");
- any other sampling order breaks the pairing: TRL refuses it;
- a last batch of one row (rows per process leaving one over) does the same for one step an
  epoch, silently: refused here, with a batch size that leaves none over;
- rows all labelled one way leave one side of the loss empty: TRL only warns (its desirable /
  undesirable weights cannot balance what is not there), and the stage would learn only to
  raise (or only to lower) its completions. Refused here, naming the counts.

TRL's `apo_zero_unpaired` loss has no KL term: the batch checks do not apply to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.capabilities.judged import JUDGED
from recipe_engine.capabilities.reference import Reference
from recipe_engine.errors import RecipeError
from recipe_engine.trainers.kind import UNPAIRED_ROWS, StageFacts, TrainerKind

# KTOTrainer: calculate_KL = loss_type not in ["apo_zero_unpaired"].
KL_FREE_LOSSES = ("apo_zero_unpaired",)
DEFAULT_LOSS = "kto"
DEFAULT_BATCH = 8  # KTOConfig's per_device_train_batch_size (TrainingArguments')
SEQUENTIAL = "sequential"


def estimates_kl(train: Mapping[str, Any]) -> bool:
    """The stage's loss estimates a KL term from mismatched pairs within each batch."""
    return train.get("loss_type", DEFAULT_LOSS) not in KL_FREE_LOSSES


@dataclass(frozen=True)
class KTOKind(TrainerKind):
    """KTO's checks of its batches and labels, and its note on how the KL term is formed."""

    def check_plan(self, stage: StageFacts) -> None:
        if estimates_kl(stage.train):
            check_kl_batches(stage)
        check_labels(stage)

    def plan_notes(self, stage: StageFacts) -> list[str]:
        if not estimates_kl(stage.train):
            return []
        batch = int(stage.train.get("per_device_train_batch_size", DEFAULT_BATCH))
        return [
            f"KL term: each prompt paired with the previous row's completion within batches of "
            f"{batch} rows, read in order (TRL's KTOTrainer)"
        ]


KIND = KTOKind(
    name="kto",
    settings_class="KTOConfig",
    module="trl",
    trainer_class="KTOTrainer",
    rows=UNPAIRED_ROWS,
    images=True,
    rank=3,
    capabilities=(Reference("KTOTrainer"), JUDGED),
)


def check_kl_batches(stage: StageFacts) -> None:
    """The batches TRL forms its KL pairs in hold two rows or more, in TRL's order."""
    key, train = f"stage.{stage.name}.train", stage.train
    batch = int(train.get("per_device_train_batch_size", DEFAULT_BATCH))
    no_kl = f"or {key}.loss_type=apo_zero_unpaired (a loss without the KL term)"
    if batch <= 1:
        raise RecipeError(
            f"`{key}.per_device_train_batch_size` is {batch}, but KTO estimates its KL term by "
            "pairing each prompt with another row's completion in the same batch: with one row "
            "a batch the term is the row's own reward (TRL's KTOTrainer refuses it). Set it to "
            f"2 or more (lower {key}.gradient_accumulation_steps to keep the effective batch), "
            f"{no_kl}.",
            key=f"{key}.per_device_train_batch_size",
        )
    order = train.get("train_sampling_strategy", SEQUENTIAL)
    if order != SEQUENTIAL:
        raise RecipeError(
            f"`{key}.train_sampling_strategy` is {order!r}, but KTO's KL pairs are formed "
            "from rows in their order (TRL's KTOTrainer refuses any other sampling). Drop the "
            f"key (KTO reads rows sequentially; shuffle the file itself if you want), {no_kl}.",
            key=f"{key}.train_sampling_strategy",
        )
    _check_last_batch(stage, batch)


def _check_last_batch(stage: StageFacts, batch: int) -> None:
    """A training run that reaches the end of an epoch must not end it on a one-row batch."""
    train, key = stage.train, f"stage.{stage.name}.train"
    per_process = math.ceil(stage.train_rows / max(stage.world_size, 1))  # DistributedSampler pads
    if per_process % batch != 1 or per_process == 1 or train.get("dataloader_drop_last"):
        return
    batches = math.ceil(per_process / batch)
    max_steps = int(train.get("max_steps", -1))
    accumulation = int(train.get("gradient_accumulation_steps", 1))
    if 0 < max_steps and max_steps * accumulation < batches:
        return  # training stops before the one-row batch
    nearest = sorted(range(2, per_process + 1), key=lambda b: (abs(b - batch), b))
    better = next(b for b in nearest if per_process % b != 1)
    raise RecipeError(
        f"Stage `{stage.name}` trains KTO on {per_process} rows per process in batches of "
        f"{batch}: each epoch ends on a batch of one row, whose KL pair is its own completion "
        "(the term KTO needs is then the row's own reward, silently). Set "
        f"{key}.per_device_train_batch_size={better}, or {key}.dataloader_drop_last=true, or "
        "hold one row more out (data.max_samples, data.eval_fraction).",
        key=f"{key}.per_device_train_batch_size",
    )


def check_labels(stage: StageFacts) -> None:
    """Both labels are among the training rows of unpaired feedback."""
    labels = stage.labels
    if labels is None or labels.desirable and labels.undesirable:
        return
    one_way = "desirable (true)" if labels.desirable else "undesirable (false)"
    missing = "undesirable (false)" if labels.desirable else "desirable (true)"
    raise RecipeError(
        f"Stage `{stage.name}` trains KTO on rows that are all labelled {one_way}: its data "
        f"({stage.rows}) holds {labels.desirable} desirable and {labels.undesirable} "
        f"undesirable rows. KTO weighs desirable completions against undesirable ones; with "
        f"one side empty it only learns to raise (or to lower) what it is shown, which TRL "
        f"does not refuse. Add {missing} rows to the data, or train the stage with "
        f"stage.{stage.name}.trainer=sft on the desirable ones.",
        key=f"stage.{stage.name}.data",
    )
