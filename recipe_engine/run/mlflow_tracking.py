"""MLflow for `report_to=[mlflow]`: one parent run per recipe run, one child run per stage.

The engine opens each stage's run itself (`MlflowClient.create_run`, tagged with its parent's
id) and hands that id to transformers' MLflowCallback in MLFLOW_RUN_ID while the stage runs:
the callback reattaches to it in whichever process trains (rank 0 alone logs) and logs the
Trainer's arguments and losses there. The engine adds what only it knows: the stage's plan
as `plan.*` params (the callback's own params keep their names), its key and lineage as tags,
and its held-out evaluation as `stage/*` metrics. Stages that run as jobs of their own
(`launcher=slurm`) nest under the run their submission opened: its id reaches them in
RECIPE_ENGINE_MLFLOW_PARENT_RUN.

Imported only when a stage reports to MLflow: `mlflow` is an extra.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import TRACKING_PARENT_VARIABLE
from recipe_engine.plan.dag import short
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.store.records import Manifest, StageMetrics

PARENT_VARIABLE = TRACKING_PARENT_VARIABLE  # the launchers hand it to a submitted job
# What transformers' MLflowCallback reads (integrations/integration_utils.py, setup).
URI_VARIABLE, RUN_VARIABLE = "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"
EXPERIMENT_VARIABLE = "MLFLOW_EXPERIMENT_NAME"
PARENT_TAG = "mlflow.parentRunId"
KEY_TAG, STATUS_TAG = "recipe_engine.stage_key", "recipe_engine.status"
TRAINED, CACHED = "trained", "cached"
# MLflow keeps a param's first value: the engine's carry a prefix the callback's never have.
PARAM_PREFIX, METRIC_PREFIX = "plan.", "stage/"


@dataclass(frozen=True)
class TrackedRun:
    """An MLflow run the engine opened: where it is and its id."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    opened_here: bool = True  # False: a process above this one opened it, and closes it


def reports_to_mlflow(stage: StagePlan) -> bool:
    """Whether the stage's `report_to` names MLflow (`all` does when mlflow is installed)."""
    report_to = stage.trainer.get("report_to") or "none"
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if "all" in names:
        import importlib.util

        return importlib.util.find_spec("mlflow") is not None
    return "mlflow" in names


def client(tracking_uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri)


def experiment_id(tracking_uri: str, recipe: str) -> str:
    """MLFLOW_EXPERIMENT_NAME's experiment (as the callback would choose it), else one named
    after the recipe; created when missing."""
    name = os.environ.get(EXPERIMENT_VARIABLE) or recipe
    mlflow = client(tracking_uri)
    found = mlflow.get_experiment_by_name(name)
    return found.experiment_id if found else mlflow.create_experiment(name)


def open_recipe_run(plan: RecipePlan, run_dir: Path) -> TrackedRun:
    """This recipe run's parent run: the one a process above this one opened (its id in
    RECIPE_ENGINE_MLFLOW_PARENT_RUN), else a new one, named after the run folder."""
    import mlflow
    from mlflow.exceptions import MlflowException

    uri = mlflow.get_tracking_uri()  # MLFLOW_TRACKING_URI, else MLflow's default store
    mlflow_client = client(uri)
    given = os.environ.get(PARENT_VARIABLE)
    try:  # the first request: before any stage runs, an unreachable server is one message
        if given:
            experiment = mlflow_client.get_run(given).info.experiment_id
            return TrackedRun(uri, experiment, given, opened_here=False)
        experiment = experiment_id(uri, plan.recipe)
    except MlflowException as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RecipeError(
            f"`report_to` names mlflow, but MLflow at {uri} did not answer: {first[:300]}. "
            "Start the tracking server, or point MLFLOW_TRACKING_URI at one.",
            key="report_to",
        ) from None
    tags = {"recipe_engine.recipe": plan.recipe, "recipe_engine.run_dir": str(run_dir)}
    run_name = f"{plan.recipe}/{run_dir.name}"
    created = mlflow_client.create_run(experiment, run_name=run_name, tags=tags)
    return TrackedRun(uri, experiment, created.info.run_id)


def close_run(run: TrackedRun, *, failed: bool) -> None:
    if not run.opened_here:
        return
    client(run.tracking_uri).set_terminated(run.run_id, "FAILED" if failed else "FINISHED")


def open_stage_run(parent: TrackedRun, plan: RecipePlan, stage: StagePlan) -> TrackedRun:
    """The stage's child run under `parent`: its plan as params, its key and lineage as tags."""
    mlflow_client = client(parent.tracking_uri)
    created = mlflow_client.create_run(
        parent.experiment_id,
        run_name=str(stage.trainer.get("run_name") or f"{plan.recipe}/{stage.name}"),
        tags={PARENT_TAG: parent.run_id, **stage_tags(plan, stage)},
    )
    run = TrackedRun(parent.tracking_uri, parent.experiment_id, created.info.run_id)
    log_params(run, plan_params(stage))
    return run


def stage_tags(plan: RecipePlan, stage: StagePlan) -> dict[str, str]:
    """The stage's key, its parent's, and its lineage: `stage@key` from the root stage."""
    chain = [*reversed(plan.graph.ancestors(stage.name)), stage.name]
    parent = plan.parent_of(stage)
    return {
        "recipe_engine.recipe": plan.recipe,
        "recipe_engine.stage": stage.name,
        KEY_TAG: stage.fingerprint,
        "recipe_engine.parent_key": parent.fingerprint if parent else "",
        "recipe_engine.lineage": lineage_text(
            [(name, plan.stages[name].fingerprint) for name in chain]
        ),
    }


def lineage_text(chain: list[tuple[str, str]]) -> str:
    """`vision@1a2b3c4d5e6f > llm@...`: each stage and its short key, the root first."""
    return " > ".join(f"{name}@{short(key)}" for name, key in chain)


def plan_params(stage: StagePlan) -> dict[str, str]:
    """What the plan decided for the stage: what is frozen, trained, LoRA'd, quantized, where
    it runs, its rows, and its trainer's settings."""
    policy, placement = stage.policy, stage.placement
    decided: dict[str, Any] = {
        "trainer": stage.config.trainer,
        "init": stage.init.description,
        "model": stage.model.name,
        "dtype": stage.dtype,
        "frozen": ",".join(policy.frozen) or "-",
        "trained": ",".join(policy.trained) or "-",
        "lora": ",".join(policy.lora.components) if policy.lora else "-",
        "quantization": policy.quantization.bits if policy.quantization else "-",
        "gradient_checkpointing": policy.gradient_checkpointing,
        "placement.mode": placement.mode,
        "placement.device": placement.device,
        "placement.world_size": placement.world_size,
        "placement.launcher": placement.starter,  # the param's name as tracked runs have it
        "data.format": stage.data.format,
        "data.train_rows": stage.data.train_rows,
        "data.eval_rows": stage.data.eval_rows,
    }
    if policy.lora:
        decided |= {f"lora.{key}": value for key, value in policy.lora.config.items()}
    decided |= {f"train.{key}": value for key, value in stage.trainer.items()}
    return {f"{PARAM_PREFIX}{key}": str(value) for key, value in decided.items()}


def log_params(run: TrackedRun, params: Mapping[str, str]) -> None:
    """Params MLflow takes: values past its length limit are left out, in batches it takes."""
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    kept = [Param(k, v) for k, v in params.items() if len(v) <= MAX_PARAM_VAL_LENGTH]
    mlflow_client = client(run.tracking_uri)
    for start in range(0, len(kept), MAX_PARAMS_TAGS_PER_BATCH):
        mlflow_client.log_batch(run.run_id, params=kept[start : start + MAX_PARAMS_TAGS_PER_BATCH])


@contextmanager
def training_into(run: TrackedRun) -> Iterator[None]:
    """MLFLOW_TRACKING_URI and MLFLOW_RUN_ID pointing the callback at `run` while the stage
    runs (the callback's start_run consumes MLFLOW_RUN_ID); the process's own values after."""
    names = (URI_VARIABLE, RUN_VARIABLE)
    before = {name: os.environ.get(name) for name in names}
    os.environ[URI_VARIABLE], os.environ[RUN_VARIABLE] = run.tracking_uri, run.run_id
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def finish_stage_run(run: TrackedRun, status: str, manifest: Manifest | None) -> None:
    """The stage's outcome on its run. A reused stage gets no metrics: they belong to the run
    that trained it (tagged here, when MLflow holds it), and would count twice beside it."""
    mlflow_client = client(run.tracking_uri)
    mlflow_client.set_tag(run.run_id, STATUS_TAG, status.split(" ")[0])
    if status.startswith(CACHED):
        mlflow_client.set_tag(run.run_id, "recipe_engine.reused", "true")
        trainer = training_run(run, mlflow_client.get_run(run.run_id).data.tags[KEY_TAG])
        mlflow_client.set_tag(run.run_id, "recipe_engine.trained_by_run", trainer or "-")
    elif manifest is not None:
        from mlflow.entities import Metric

        values = stage_metrics(manifest.metrics)
        metrics = [Metric(key, value, 0, 0) for key, value in values.items()]
        mlflow_client.log_batch(run.run_id, metrics=metrics)
    mlflow_client.set_terminated(run.run_id, "FINISHED")


def training_run(run: TrackedRun, stage_key: str) -> str | None:
    """The newest run in `run`'s experiment that trained the stage keyed `stage_key`."""
    found = client(run.tracking_uri).search_runs(
        [run.experiment_id],
        filter_string=f"tags.`{KEY_TAG}` = '{stage_key}' and tags.`{STATUS_TAG}` = '{TRAINED}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return found[0].info.run_id if found else None


def stage_metrics(metrics: StageMetrics) -> dict[str, float]:
    """The engine's numbers for a stage (steps, held-out loss and exact match, the base's,
    peak memory, a preference stage's reward metrics), as `stage/<name>`."""
    numbers = {
        name: float(value)
        for name, value in asdict(metrics).items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    numbers |= {f"preference/{name}": float(v) for name, v in (metrics.preference or {}).items()}
    return {f"{METRIC_PREFIX}{name}": value for name, value in numbers.items()}


def parent_of(run: TrackedRun) -> TrackedRun:
    """The run `run` nests under (a stage's run: its recipe run's)."""
    parent = client(run.tracking_uri).get_run(run.run_id).data.tags[PARENT_TAG]
    return TrackedRun(run.tracking_uri, run.experiment_id, parent)


def log_files(run: TrackedRun, files: list[Path], folder: str | None = None) -> None:
    """Files that exist, as artifacts of `run` (under `folder`)."""
    mlflow_client = client(run.tracking_uri)
    for path in files:
        if path.is_file():
            mlflow_client.log_artifact(run.run_id, str(path), folder)


def log_text(run: TrackedRun, text: str, artifact_file: str) -> None:
    client(run.tracking_uri).log_text(run.run_id, text, artifact_file)
