"""The libraries' judge (`config.library_judge`, asked by `run.preflight`): one process per
engine process imports the libraries once and forks a clean child per verdict, so later
verdicts skip the imports; a refusal is still the library's words, a crashed verdict one
message, and a judge that crashed or went idle is replaced."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.resolve import cache
from recipe_engine.run import preflight

ACCEPTED = [{"stage": "llm", "SFTConfig": {"use_cpu": True}, "LoraConfig": {"r": 8}}]
REFUSED = [{"stage": "llm", "SFTConfig": {"use_cpu": True, "lr_scheduler_type": "nope"}}]
# Refused for its `report_to`, and without the `stage` its refusal names: the child's
# `library_objects.judge` raises KeyError, an exception that is no library's refusal.
CRASHES = [{"SFTConfig": {"use_cpu": True, "report_to": "kubeflow"}}]


@pytest.fixture(autouse=True)
def no_tracker_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge is replaced when these change; no test here wants that by accident."""
    for name in (*preflight.TRACKER_SWITCHES, *preflight.TRACKER_SETTINGS):
        monkeypatch.delenv(name, raising=False)


def test_verdicts_of_one_process_come_from_one_judge_forking_a_child_each() -> None:
    judge = preflight.start_judge()
    assert preflight._ask_child(ACCEPTED) == {}
    refusal = preflight._ask_child(REFUSED)
    assert (
        refusal["class"] == "SFTConfig" and "nope is not a valid SchedulerType" in refusal["error"]
    )
    assert preflight._ask_child(ACCEPTED) == {}  # a refusal left nothing behind
    assert preflight.start_judge() is judge and judge.process.poll() is None


def test_a_plan_stops_the_judge_it_never_asked_and_keeps_one_it_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path))
    if preflight._judge is not None:
        preflight._judge.stop()  # an earlier test's, asked
    with preflight.judge_at_first_read():
        cache.remembered("rows", {"read": 1}, lambda: {})  # a first read: the judge starts
        unasked = preflight.start_judge()
    assert unasked.process.poll() is not None  # its verdict was cached: stopped
    with preflight.judge_at_first_read():
        cache.remembered("rows", {"read": 2}, lambda: {})
        assert preflight._ask_child(ACCEPTED) == {}
    asked = preflight.start_judge()
    assert asked is not unasked and asked.process.poll() is None


def test_a_run_stops_the_judge_once_its_plans_are_made() -> None:
    """`run` trains next: the judge's memory (the imported stack) is given back first."""
    judge = preflight.start_judge()
    assert preflight._ask_child(ACCEPTED) == {}
    preflight.stop_judge()
    assert judge.process.poll() is not None and preflight._judge is None
    preflight.stop_judge()  # none left: nothing to do
    assert preflight._ask_child(ACCEPTED) == {}  # a later plan starts another
    assert preflight._judge is not None and preflight._judge is not judge


def test_a_verdict_that_crashes_is_one_message_and_the_judge_goes_on() -> None:
    judge = preflight.start_judge()
    with pytest.raises(RecipeError) as error:
        preflight._ask_child(CRASHES)
    assert str(error.value) == (
        "Could not check the stage settings with the installed libraries (KeyError: 'stage')."
        " Reinstall them with `make install`."
    )
    assert preflight._ask_child(ACCEPTED) == {}
    assert preflight.start_judge() is judge


def test_a_judge_killed_while_asked_is_one_message_and_the_next_verdict_has_a_new_one() -> None:
    judge = preflight.start_judge()
    os.kill(judge.process.pid, signal.SIGKILL)
    with pytest.raises(RecipeError, match=r"libraries \(the judge: ended by signal 9\)"):
        judge.ask(ACCEPTED)
    assert preflight._ask_child(ACCEPTED) == {}  # a judge that ended is never asked again
    assert preflight.start_judge() is not judge


def test_a_judge_unasked_for_its_idle_time_ends_and_is_replaced() -> None:
    idle = preflight.LibraryJudge(idle_seconds=0.1)
    until = time.monotonic() + 600  # its imports come first (seconds)
    while idle.process.poll() is None and time.monotonic() < until:
        time.sleep(0.2)
    assert idle.process.returncode == 0
    assert idle.ask(ACCEPTED) is None  # ended idle: `_ask_child` asks a new one
    assert not idle.fits()


def test_a_tracker_variable_set_since_gets_a_judge_that_imported_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeflow: list[JsonObject] = [
        {"stage": "llm", "SFTConfig": {"use_cpu": True, "report_to": "kubeflow"}}
    ]
    before = preflight.start_judge()
    assert "KUBEFLOW_TRAINER_SERVER_URL is unset" in preflight._ask_child(kubeflow)["message"]
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "http://127.0.0.1:1")
    assert preflight._ask_child(kubeflow) == {}
    assert preflight.start_judge() is not before


def test_where_forking_is_unsafe_each_judge_judges_one_verdict_itself() -> None:
    once = preflight.LibraryJudge(forks=False)  # as on macOS
    assert once.ask(REFUSED)["error"].startswith("nope is not a valid SchedulerType")
    assert once.process.wait(timeout=60) == 0
    assert once.ask(ACCEPTED) is None  # it has judged: `_ask_child` asks a new one
