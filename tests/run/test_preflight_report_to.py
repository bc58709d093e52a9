"""Trackers at plan time: `report_to` without its package is refused, naming what to install;
tracker-only settings never change a stage key (so they never force a retrain)."""

from __future__ import annotations

import pytest
from machines import CPU_ONLY

from recipe_engine.cli.main import main
from recipe_engine.config import library_objects
from recipe_engine.config.compose import compose_config
from recipe_engine.config.library_keys import check_train
from recipe_engine.errors import RecipeError
from recipe_engine.run import preflight as library_check
from recipe_engine.run.planning import plan_from_config

# Settings that change what is logged and where, never what is learned.
TRACKER_ONLY = {
    "report_to": "tensorboard",
    "run_name": "my-run",
    "logging_dir": "elsewhere/tb",
    "logging_steps": 1,
    "logging_first_step": False,
    "project": "my-project",
}


def plan(*overrides: str):
    return plan_from_config(compose_config(list(overrides)), CPU_ONLY)


def keys(result) -> dict[str, str]:
    return {name: stage.fingerprint for name, stage in result.stages.items()}


def test_tracker_only_settings_leave_every_stage_key_alone():
    base = plan("recipe=r3-two-stage")  # the llm stage's key also carries its parent's
    tracked = plan(
        "recipe=r3-two-stage",
        *(f"++stage.{s}.train.{k}={v}" for s in ("vision", "llm") for k, v in TRACKER_ONLY.items()),
    )
    assert keys(tracked) == keys(base)
    assert tracked.stages["llm"].trainer["report_to"] == "tensorboard"
    assert "logging_dir" not in tracked.stages["llm"].trainer  # the engine's, not SFTConfig's
    learned = plan("recipe=r3-two-stage", "stage.vision.train.learning_rate=1e-3")
    assert keys(learned)["vision"] != keys(base)["vision"]  # the check can tell


def only_reporting(payload: list[dict]) -> dict:
    """The child's verdict on `report_to` alone, in this process so the patch below reaches
    it (the real child is a separate interpreter that sees what is really installed)."""
    return next((r for r in map(library_objects.reporting_refusal, payload) if r), {})


@pytest.fixture
def nothing_but_tensorboard(monkeypatch):
    """An environment where only TensorBoard is installed, whatever is installed here."""
    monkeypatch.setattr(library_objects, "available_integrations", lambda: {"tensorboard"})
    monkeypatch.setattr(library_check, "_ask_child", only_reporting)
    remembered = library_check.cache.remembered  # a passing verdict kept earlier must not answer

    def fresh_libraries(kind, inputs, check):
        return check() if kind == "libraries" else remembered(kind, inputs, check)

    monkeypatch.setattr(library_check.cache, "remembered", fresh_libraries)


@pytest.mark.usefixtures("nothing_but_tensorboard")
def test_report_to_without_its_package_exits_2_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["recipe=text-lora", "stage.llm.train.report_to=wandb", f"output_root={tmp_path}/o"]
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [message] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "`stage.llm.train.report_to` names wandb" in message
    assert "pip install 'recipe-engine[wandb]'" in message
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("report_to", "install"),
    [
        ("mlflow", "pip install 'recipe-engine[mlflow]'"),
        (["tensorboard", "comet_ml"], "pip install comet_ml"),  # no extra: the package itself
        ("azure_ml", "pip install azureml-core"),
        ("kubeflow", "KUBEFLOW_TRAINER_SERVER_URL"),  # no package: set inside a Kubeflow job
    ],
)
@pytest.mark.usefixtures("nothing_but_tensorboard")
def test_each_missing_integration_names_what_to_install(report_to, install):
    verdict = library_objects.reporting_refusal(
        {"stage": "llm", "SFTConfig": {"report_to": report_to}}
    )
    assert install in verdict["message"] and verdict["key"] == "report_to"


@pytest.mark.parametrize("report_to", ["none", "all", "tensorboard", ["tensorboard"], None])
@pytest.mark.usefixtures("nothing_but_tensorboard")
def test_installed_integrations_pass(report_to):
    stage = {"stage": "llm", "SFTConfig": {"report_to": report_to}}
    assert library_objects.reporting_refusal(stage) == {}


def test_logging_dir_is_an_engine_key_holding_a_folder():
    check_train("llm", {"logging_dir": "tb/llm"})
    with pytest.raises(RecipeError, match="stage.llm.train.logging_dir` is 5; expected a folder"):
        check_train("llm", {"logging_dir": 5})
    with pytest.raises(RecipeError, match="Did you mean `logging_dir`"):
        check_train("llm", {"loging_dir": "tb"})
