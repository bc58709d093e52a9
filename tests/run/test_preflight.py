"""The libraries' verdict on a plan's settings, judged by the real child process and
remembered: a refusal is a fact about the settings as much as an acceptance, so `plan` then
`run` of a refused setting starts one child; what the trackers read from the environment is
part of the verdict's key, so a changed variable is judged again."""

from __future__ import annotations

from pathlib import Path

import pytest
from machines import CPU_ONLY

from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.run import preflight
from recipe_engine.run.planning import plan_from_config

KUBEFLOW = ("recipe=text-lora", "++stage.llm.train.report_to=kubeflow")


@pytest.fixture
def children_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[JsonObject]]:
    """A cache of the test's own, and the payload of each real child asked for a verdict."""
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path / "cache"))
    for name in (*preflight.TRACKER_SWITCHES, *preflight.TRACKER_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    asked: list[list[JsonObject]] = []
    real = preflight._ask_child

    def counted(payload):
        asked.append(payload)
        return real(payload)

    monkeypatch.setattr(preflight, "_ask_child", counted)
    return asked


def refusal(*overrides: str) -> str | None:
    try:
        plan_from_config(compose_config(list(overrides)), CPU_ONLY)
    except RecipeError as error:
        return str(error)
    return None


def test_a_refused_setting_is_judged_once_and_a_tracker_variable_is_judged_again(
    children_asked: list[list[JsonObject]], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = refusal(*KUBEFLOW)
    assert first is not None and "KUBEFLOW_TRAINER_SERVER_URL is unset" in first
    assert refusal(*KUBEFLOW) == first  # the same words, from the remembered verdict
    assert len(children_asked) == 1

    # Inside a Kubeflow Trainer job the integration reports: the child sees the variable.
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "http://127.0.0.1:1")
    assert refusal(*KUBEFLOW) is None
    assert len(children_asked) == 2
    assert refusal(*KUBEFLOW) is None  # accepted, and remembered as accepted
    assert len(children_asked) == 2
