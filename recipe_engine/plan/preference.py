"""A stage's trainer against its rows, and what `plan` says about its reference model.

Pure: the rows' format (`resolve` surveyed it) decides whether the trainer can take them, so a
preference trainer given instruction rows, an SFT stage given preference pairs, or image pairs
for a text-only trainer are refused before any weight loads.
"""

from __future__ import annotations

from recipe_engine.config.schema import StageConfig
from recipe_engine.config.trainers import TRAINERS
from recipe_engine.errors import RecipeError
from recipe_engine.plan.recipe_plan import PolicyPlan
from recipe_engine.resolve.formats import has_images, is_preference
from recipe_engine.resolve.inputs import Rows

PAIR_COLUMNS = "prompt / chosen / rejected"


def check_rows_fit_trainer(name: str, stage: StageConfig, rows: Rows) -> None:
    """The stage's trainer takes rows of this kind (`config.trainers`)."""
    if stage.evaluate_only:
        return  # no trainer: the held-out rows are only asked
    kind = TRAINERS[stage.trainer]
    pairs = is_preference(rows.format)
    if kind.preference and not pairs:
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name}, which learns from preference pairs, but "
            f"its data ({rows.describe()}) holds instruction rows. Give it {PAIR_COLUMNS} "
            f"rows (stage.{name}.data.path=<file>; map your columns with "
            f"stage.{name}.data.columns.chosen=<column> ...), or set stage.{name}.trainer=sft.",
            key=f"stage.{name}.trainer",
        )
    if pairs and not kind.preference:
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name}, but its data ({rows.describe()}) holds "
            f"preference pairs ({PAIR_COLUMNS}). Set stage.{name}.trainer=dpo (or orpo) to "
            f"learn from them, or give the stage instruction rows (stage.{name}.data...).",
            key=f"stage.{name}.trainer",
        )
    if has_images(rows.format) and not kind.images:
        raise RecipeError(
            f"Stage `{name}` trains with {kind.name} on image rows, but TRL's "
            f"{kind.trainer_class} takes text only. Use stage.{name}.trainer=dpo for image "
            "pairs, or give the stage text rows.",
            key=f"stage.{name}.trainer",
        )


def trainer_notes(name: str, stage: StageConfig, policy: PolicyPlan) -> list[str]:
    """What `plan` says of a preference stage: its trainer and its reference model."""
    if stage.evaluate_only or stage.trainer not in TRAINERS:
        return []
    kind = TRAINERS[stage.trainer]
    if not kind.preference:
        return []
    notes = [f"trainer: {kind.name} ({kind.module}.{kind.trainer_class})"]
    if kind.experimental:
        notes[0] += ": TRL ships it as experimental, its settings may change between releases"
    if not kind.reference:
        notes.append("reference: none (reference-free loss)")
    elif policy.lora is not None:
        notes.append("reference: the adapter-disabled base (the stage's starting weights, no copy)")
    elif stage.train.get("precompute_ref_log_probs"):
        notes.append("reference: log-probs precomputed from the starting weights before training")
    else:
        notes.append(
            f"reference: a frozen copy of the starting weights (in memory beside the policy; "
            f"LoRA on stage `{name}` would use the adapter-disabled base instead)"
        )
    return notes
