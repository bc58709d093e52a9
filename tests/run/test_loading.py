"""How a stage loads its processor: the model entry's `processor` settings over the saved
config, for training and evaluation alike; a setting the processor does not take is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from engine_cli import SHORT_STAGES, forked_engine, manifests

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.run.loading import load_processor


def test_a_setting_the_processor_does_not_take_is_refused_naming_it() -> None:
    """transformers drops it silently: the stage would train at the default limits."""
    folder = str(build_tiny_model("tiny-qwen2-vl"))
    entry = ModelConfig(name="tiny-qwen2-vl", source="tiny", id="tiny-qwen2-vl")
    with pytest.raises(RecipeError, match="Did you mean `max_pixels`") as refused:
        load_processor(folder, replace(entry, processor={"max_pixel": 3136}))
    assert refused.value.key == "model.processor.max_pixel"
    taken = load_processor(folder, replace(entry, processor={"max_pixels": 3136}))
    assert taken.image_processor.size["longest_edge"] == 3136


# Run first in the engine's process: every processor it loads is logged (the settings it was
# loaded with), then loaded as it would be.
LOAD_LOG = """
import json, os
from transformers import AutoProcessor

loaded = AutoProcessor.from_pretrained.__func__

def logged(cls, location, *args, **kwargs):
    with open(os.environ["PROCESSOR_LOG"], "a") as log:
        log.write(json.dumps(kwargs.get("max_pixels")) + "\\n")
    return loaded(cls, location, *args, **kwargs)

AutoProcessor.from_pretrained = classmethod(logged)
"""


def test_a_run_trains_and_evaluates_with_the_entrys_processor_settings(tmp_path: Path) -> None:
    """r2 on the tiny Qwen2-VL with its images capped at 56 x 56 px: every processor the run
    loads (training's, which the stage's and the base's measurements share) has the cap, the
    manifest records it for later readers, and the processor saved with the weights is it."""
    prelude, log = tmp_path / "log_loads.py", tmp_path / "loads.jsonl"
    prelude.write_text(LOAD_LOG)
    short = [arg for arg in SHORT_STAGES if "stage.llm" not in arg]  # r2 has no llm stage
    args = ["recipe=r2-vision-only", *short, "+model.processor.max_pixels=3136"]
    done = forked_engine(*args, cwd=tmp_path, env={"PROCESSOR_LOG": str(log)}, prelude=prelude)
    assert done.returncode == 0, done.stderr[-3000:]
    loads = [json.loads(line) for line in log.read_text().splitlines()]
    assert loads and set(loads) == {3136}
    manifest = manifests(tmp_path / "out")["vision"]
    assert manifest["model_entry"]["processor"] == {"max_pixels": 3136}
    metrics = manifest["metrics"]
    assert metrics["eval_samples"] == 4 and metrics["evaluation_error"] is None
    [saved] = (tmp_path / "out" / "store").glob("*/processor_config.json")
    assert json.loads(saved.read_text())["image_processor"]["size"]["longest_edge"] == 3136
