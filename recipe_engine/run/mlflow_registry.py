"""An export registered in MLflow's model registry (`export ... register=true`).

The export folder is logged as the `export` artifacts of the run that trained the stage (found
by the stage key its run is tagged with, in the experiment the recipe's runs go to), so the
model version links to the run's params and metrics; when MLflow holds no such run, of a run
opened for the export. The version is tagged with the stage key and its lineage.
"""

from __future__ import annotations

from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.run.exporting import ExportPlan
from recipe_engine.run.mlflow_tracking import (
    KEY_TAG,
    STATUS_TAG,
    TrackedRun,
    client,
    experiment_id,
    lineage_text,
    training_run,
)

ARTIFACTS = "export"


def register_export(folder: Path, plan: ExportPlan, name: str | None) -> str:
    """Register the export in `folder` as a new version of model `name` (default
    `<recipe>-<stage>`); the line saying so."""
    import mlflow
    from mlflow.exceptions import MlflowException

    uri = mlflow.get_tracking_uri()
    try:
        named = name or f"{plan.manifest.recipe}-{plan.manifest.stage}"
        return _register(folder, plan, named, uri)
    except MlflowException as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RecipeError(
            f"The export is in {folder}, but registering it in MLflow at {uri} failed: "
            f"{first[:300]}. Check the tracking server (MLFLOW_TRACKING_URI), then export "
            "again, or add register=false."
        ) from None


def _register(folder: Path, plan: ExportPlan, name: str, uri: str) -> str:
    final = plan.manifest
    mlflow_client = client(uri)
    run = _run_for(TrackedRun(uri, experiment_id(uri, final.recipe), ""), plan)
    mlflow_client.log_artifacts(run.run_id, str(folder), ARTIFACTS)
    if not mlflow_client.search_registered_models(filter_string=f"name = '{name}'"):
        mlflow_client.create_registered_model(name)
    source = f"{mlflow_client.get_run(run.run_id).info.artifact_uri}/{ARTIFACTS}"
    version = mlflow_client.create_model_version(
        name, source, run_id=run.run_id, tags=version_tags(plan, folder)
    )
    return f"registered in MLflow ({uri}) as model `{name}` version {version.version}"


def _run_for(where: TrackedRun, plan: ExportPlan) -> TrackedRun:
    """The run that trained the exported stage, or a run opened for the export."""
    final = plan.manifest
    found = training_run(where, final.fingerprint)
    if found:
        return TrackedRun(where.tracking_uri, where.experiment_id, found)
    created = client(where.tracking_uri).create_run(
        where.experiment_id,
        run_name=f"export {final.recipe}/{final.stage}",
        tags={KEY_TAG: final.fingerprint, STATUS_TAG: "exported"},
    )
    return TrackedRun(where.tracking_uri, where.experiment_id, created.info.run_id)


def version_tags(plan: ExportPlan, folder: Path) -> dict[str, str]:
    final = plan.manifest
    return {
        "recipe_engine.recipe": final.recipe,
        "recipe_engine.stage": final.stage,
        KEY_TAG: final.fingerprint,
        "recipe_engine.parent_key": final.parent_fingerprint or "",
        "recipe_engine.lineage": lineage_text([(m.stage, m.fingerprint) for m in plan.lineage]),
        "recipe_engine.form": plan.form,
        "recipe_engine.base": plan.base,
        "recipe_engine.export_folder": str(folder.resolve()),
    }
