"""The packing benchmark hands its plain TRL script the stages the engine plans (no timing)."""

from __future__ import annotations

import json

import pytest

from recipe_engine.errors import RecipeError
from tools.bench_packing import _overrides, plain_trl_jobs


def test_the_plain_script_gets_every_stage_in_order_with_its_planned_settings(tmp_path):
    jobs = plain_trl_jobs(_overrides("r3-two-stage", ("vision", "llm"), False), tmp_path)
    vision, llm = jobs
    assert vision["lora"] is None and set(vision["trained"]) == {"vision_tower", "projector"}
    assert llm["model"] == str(tmp_path / "vision")  # the llm stage starts from the vision one
    assert llm["quantization"]["load_in_4bit"] and llm["lora"]["r"] == 16
    assert vision["trainer"]["max_steps"] == llm["trainer"]["max_steps"] == 30
    json.dumps(jobs)


def test_packing_reaches_the_plain_script_and_image_rows_are_refused(tmp_path):
    [job] = plain_trl_jobs(_overrides("text-lora", ("llm",), True), tmp_path)
    assert job["trainer"]["packing"] is True and job["trainer"]["max_length"] == 128
    with pytest.raises(RecipeError, match="image rows"):
        plain_trl_jobs(_overrides("r3-two-stage", ("vision", "llm"), True), tmp_path)
