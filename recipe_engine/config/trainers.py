"""The trainers a stage can train with (`stage.<name>.trainer`), declared once, as data.

Every trainer is a TRL trainer with its own settings class: a stage's `train` keys are that
class's fields (SFTConfig for `sft`, DPOConfig for `dpo`, ORPOConfig for `orpo`, KTOConfig for
`kto`), checked
against the installed class like SFTConfig's always were. What differs between them and
matters before a weight loads is here: which rows they take, whether they compare the policy
with a frozen reference model (memory, `plan`'s note), and whether TRL 1.16 lets them take
image rows. Nothing heavy is imported here; `run` imports the trainer class.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipe_engine.errors import RecipeError, did_you_mean

SFT, DPO, ORPO, KTO = "sft", "dpo", "orpo", "kto"
# A stage left at `auto` trains with the first trainer that takes its rows (`trainer_for`):
# SFT on instruction rows, DPO on preference pairs, KTO on unpaired feedback.
AUTO = "auto"
# Rows a trainer takes: instruction rows (messages, prompt/completion), preference pairs
# (prompt / chosen / rejected), or unpaired feedback (prompt / completion / label, KTO's).
INSTRUCTION_ROWS, PREFERENCE_ROWS, UNPAIRED_ROWS = "instruction", "preference", "unpaired"
ROW_KINDS = (INSTRUCTION_ROWS, PREFERENCE_ROWS, UNPAIRED_ROWS)


@dataclass(frozen=True)
class TrainerKind:
    """One trainer: TRL's trainer and settings classes, and what it asks of rows and memory."""

    name: str
    settings_class: str  # the class `train` keys belong to (library_keys.LIBRARY_CLASSES)
    module: str  # where TRL keeps the trainer and its settings class
    trainer_class: str
    rows: str  # INSTRUCTION_ROWS | PREFERENCE_ROWS | UNPAIRED_ROWS
    reference: bool  # scores the policy against a frozen reference model
    images: bool  # takes image rows (a vision-language stage's)
    experimental: bool = False  # TRL ships it under trl.experimental (its API may change)
    # Its evaluate() reads only the rows it tokenized when it was built (ORPO's older
    # trainer), not raw rows: the held-out rows are taken from those.
    evaluates_tokenized: bool = False
    # Estimates a KL term from mismatched prompt / completion pairs inside each training batch
    # (KTO): what that asks of batches and labels is checked by plan/feedback.py.
    kl_batch: bool = False

    @property
    def preference(self) -> bool:
        """Learns from preference pairs (prompt / chosen / rejected)."""
        return self.rows == PREFERENCE_ROWS

    @property
    def judged(self) -> bool:
        """Learns from judged answers (pairs, or completions labelled desirable or not) rather
        than from demonstrations: a preference trainer, judged by `compare` on its rows."""
        return self.rows != INSTRUCTION_ROWS


TRAINERS: dict[str, TrainerKind] = {
    kind.name: kind
    for kind in (
        TrainerKind(SFT, "SFTConfig", "trl", "SFTTrainer", INSTRUCTION_ROWS, False, True),
        # The reference: the adapter-disabled base for a LoRA policy (no second copy), the
        # parent's weights (a frozen copy) for a full fine-tune.
        TrainerKind(DPO, "DPOConfig", "trl", "DPOTrainer", PREFERENCE_ROWS, True, True),
        # Odds-ratio preference optimisation: no reference model; TRL 1.16 keeps it in
        # trl.experimental and tokenizes text only.
        TrainerKind(
            ORPO,
            "ORPOConfig",
            "trl.experimental.orpo",
            "ORPOTrainer",
            PREFERENCE_ROWS,
            reference=False,
            images=False,
            experimental=True,
            evaluates_tokenized=True,
        ),
        # Kahneman-Tversky optimisation: one completion per row, labelled desirable or not;
        # the reference as DPO's. TRL builds a KL batch of mismatched prompt / completion
        # pairs inside each training batch (plan/feedback.py says what that asks of a stage).
        TrainerKind(
            KTO, "KTOConfig", "trl", "KTOTrainer", UNPAIRED_ROWS, True, True, kl_batch=True
        ),
    )
}
# What each kind of rows is, in the words a refusal uses, and the trainers that take them.
ROWS_IN_WORDS = {
    INSTRUCTION_ROWS: "instruction rows (messages, prompt / completion, or language-modeling text)",
    PREFERENCE_ROWS: "preference pairs (prompt / chosen / rejected)",
    UNPAIRED_ROWS: "unpaired feedback (prompt / completion / label)",
}


def trainers_taking(rows: str) -> list[str]:
    """The trainers that learn from this kind of rows, in the order they are declared."""
    return [kind.name for kind in TRAINERS.values() if kind.rows == rows]


def trainer_for(rows: str) -> str:
    """The trainer a stage left at `auto` learns from these rows with."""
    return trainers_taking(rows)[0]


def trainer_kinds(name: str, stage: str) -> list[TrainerKind]:
    """The trainers `stage.<stage>.trainer` may mean: the one it names, or with `auto` every
    one (its rows choose later); an unknown name is one message."""
    if name == AUTO:
        return list(TRAINERS.values())
    if name in TRAINERS:
        return [TRAINERS[name]]
    key = f"stage.{stage}.trainer"
    names = [AUTO, *TRAINERS]
    raise RecipeError(
        f"`{key}` is {name!r}, which is not a trainer the engine has.{did_you_mean(name, names)}"
        f" Trainers: {', '.join(names)} (auto: the one the rows call for; sft: instruction rows; "
        "dpo, orpo: preference pairs with prompt / chosen / rejected; kto: unpaired rows with "
        "prompt / completion / label).",
        key=key,
    )
