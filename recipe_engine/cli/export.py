"""`export STAGE_OR_RUN [to=DIR] [merge=true|false] [base=DIR_OR_ID] [format=hf|gguf]
[push=true repo=ORG/NAME] [register=true|false registered_model=NAME]`: a committed stage as a
folder the stock Auto classes load from anywhere, with its model card; optionally uploaded to
the hub, and registered as an MLflow model version."""

from __future__ import annotations

import re
from pathlib import Path

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.export_options import ExportOptions, compose_export
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.report.export_card import export_card
from recipe_engine.report.inspection import SUMMARY_FILE
from recipe_engine.run.exporting import ExportPlan, ExportRequest, decide_export, write_export
from recipe_engine.store.records import EVALUATION, Manifest, RunSummary

USAGE = """usage: python -m recipe_engine export STAGE_OR_RUN [key=value ...]

STAGE_OR_RUN: a run folder (its last trained stage), RUN_DIR:STAGE, a store folder
(outputs/store/<key>) or a store key (its first characters will do).

  to=DIR          where to write (default: outputs/exports/<recipe>-<stage>-<key>-<form>)
  merge=true      merged weights, standalone (default); false: the LoRA adapter alone
  base=DIR_OR_ID  merge=false on a local base: the base the adapter names (an export of
                  the parent stage, or its hub id); hub bases are named at their revision
  format=hf       hf (a save_pretrained folder); gguf says what to run
  push=true repo=ORG/NAME   upload the folder with huggingface_hub (HF_TOKEN / hf auth login)
  register=true   register the export as an MLflow model version (default: true when
                  MLFLOW_TRACKING_URI is set); registered_model=NAME (default <recipe>-<stage>)
  output_root=DIR where store keys are looked up (default: outputs)"""

KEY = re.compile(r"^[0-9a-f]{6,40}$")


def main(args: list[str], multirun: bool) -> int:
    """The `export` verb."""
    if multirun:
        raise RecipeError("`export` takes no sweep: drop -m/--multirun.")
    options = parse_options(args)
    source = stage_folder(options.target, options.output_root)
    plan = decide_export(ExportRequest(source, options.to, options.merge, options.base))
    folder = write_export(plan, export_card(plan))
    print(f"exported stage `{plan.manifest.stage}` ({plan.form}) to {folder}")
    if options.push:
        print(push(folder, str(options.repo), plan))
    if options.register:
        from recipe_engine.run.mlflow_registry import register_export

        print(register_export(folder, plan, options.registered_model))
    return 0


def parse_options(args: list[str]) -> ExportOptions:
    """The one stage or run to export (the word without `=`), and export's keys composed by
    Hydra (`config.export_options`)."""
    overrides, flags = split_hydra_flags(args)
    targets = [w for w in overrides if "=" not in w and not w.startswith("~")]
    if len(targets) != 1:
        raise RecipeError(f"`export` takes one stage or run, got {len(targets)}.\n{USAGE}")
    keys = [w for w in overrides if w not in targets]
    return compose_export(targets[0], keys, config_dirs(flags))


def stage_folder(target: str, output_root: Path) -> Path:
    """The store folder of the stage `target` names."""
    path = Path(target).expanduser()
    run, sep, stage = target.rpartition(":")
    if sep and run and (Path(run).expanduser() / SUMMARY_FILE).is_file():
        return _run_stage(Path(run).expanduser(), stage)
    if (path / "manifest.json").is_file():
        return path
    if (path / SUMMARY_FILE).is_file():
        return _run_stage(path, None)
    if KEY.match(target):
        return _store_key(target, output_root / "store")
    what = "does not exist" if not path.exists() else "is neither a run nor a stage folder"
    raise RecipeError(
        f"Cannot export `{target}`: it {what}. Give a run folder (outputs/runs/...), "
        "RUN_DIR:STAGE, a store folder or a store key."
    )


def _run_stage(run_dir: Path, stage: str | None) -> Path:
    rows = RunSummary.load(run_dir).stages
    names = [row.stage for row in rows]
    trained = [row.stage for row in rows if _holds_weights(row.output_path(run_dir))]
    if not trained:
        raise RecipeError(f"Run {run_dir} has no stage with weights: nothing to export.")
    stage = stage or trained[-1]  # the last stage that trained (not a final evaluation)
    if stage not in names:
        raise RecipeError(
            f"Run {run_dir} has no stage `{stage}`.{did_you_mean(stage, names)} "
            f"Stages: {', '.join(names)}."
        )
    folder = rows[names.index(stage)].output_path(run_dir)
    if not (folder / "manifest.json").is_file():
        raise RecipeError(
            f"Stage `{stage}` of {run_dir} points at {folder}, which no longer holds a stage "
            "(outputs cleaned?). Rerun the recipe to recreate it."
        )
    return folder


def _holds_weights(folder: Path) -> bool:
    manifest = folder / "manifest.json"
    return manifest.is_file() and Manifest.load(folder).format != EVALUATION


def _store_key(key: str, store: Path) -> Path:
    found = sorted(p for p in store.glob(f"{key}*") if (p / "manifest.json").is_file())
    if len(found) != 1:
        what = "no stage" if not found else f"{len(found)} stages"
        raise RecipeError(f"Store key `{key}` matches {what} in {store}; give more of it.")
    return found[0]


def push(folder: Path, repo: str, plan: ExportPlan) -> str:
    """Upload the folder as one commit; the export stays on disk whatever the hub answers."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    message = f"recipe-engine export of {plan.manifest.recipe}:{plan.manifest.stage}"
    try:
        api.create_repo(repo, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo, folder_path=folder, commit_message=message, ignore_patterns=[".*"]
        )
    except (HfHubHTTPError, OSError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RecipeError(
            f"The export is in {folder}, but pushing it to `{repo}` failed: {first}. Check "
            "HF_TOKEN (or `hf auth login`) and the repository name, then push again."
        ) from None
    return f"pushed to {repo} at commit {commit.oid[:12]}"
