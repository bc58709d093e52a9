"""The model card of an export: what `run.exporting` decided for a stage, rendered by
`report.model_card`. The `export` verb writes it beside the weights; the end of a run
(`evaluate.after_run`) hands each stage's default card to its MLflow run."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.report.model_card import CardFacts, model_card
from recipe_engine.run.exporting import ExportPlan, ExportRequest, decide_export


def export_card(plan: ExportPlan) -> str:
    facts = CardFacts(plan.form, plan.base, plan.base_revision, plan.adapter_base)
    return model_card(plan.lineage, facts)


def stage_card(folder: Path) -> str | None:
    """The model card a default export of the stage in `folder` would carry (None for a stage
    that holds no weights)."""
    try:
        return export_card(decide_export(ExportRequest(folder)))
    except RecipeError:
        return None
