"""`run.inspecting`: what `inspect` loads and measures, on real stage outputs (r3: full vision
stage, LoRA llm stage), model entries (meta and 4-bit) and every kind of unusable target; the
verb end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from recipe_engine.cli.main import main
from recipe_engine.errors import RecipeError
from recipe_engine.report.inspection import render, render_pair, resolve_target
from recipe_engine.run.inspecting import InspectOptions, inspect_target
from recipe_engine.store.records import RunSummary

FLOATS = {"float32", "bfloat16", "float16"}


@pytest.fixture(scope="module")
def r3(tmp_path_factory) -> Path:
    """A finished two-stage run (2 steps per stage): its run folder."""
    from recipe_engine.config.compose import compose_config
    from recipe_engine.run.planning import plan_from_config
    from recipe_engine.run.recipe import run_recipe

    root = tmp_path_factory.mktemp("r3")
    cfg = compose_config(
        [
            "recipe=r3-two-stage",
            f"output_root={root}",
            "+stage.vision.train.max_steps=2",
            "+stage.llm.train.max_steps=2",
            "data.max_samples=16",
            "eval.enabled=false",  # evaluation is not what these tests inspect
        ]
    )
    run_recipe(plan_from_config(cfg), root / "runs" / "r3")
    return root / "runs" / "r3"


def _inspect(text: str, **options):
    return inspect_target(resolve_target(text), InspectOptions(**options))


def _stage_output(run: Path, stage: str) -> Path:
    rows = RunSummary.load(run).stages
    return next(r.output_path(run) for r in rows if r.stage == stage)


def test_vision_stage_shows_vision_trained_language_frozen(r3, capsys):
    result = _inspect(f"{r3}:vision")
    rows = result.rows
    for part in ("vision_tower", "projector"):
        assert rows[part].stage_trainable == rows[part].params > 0
    for part in ("language_model", "embeddings", "lm_head"):
        assert rows[part].stage_trainable == 0
    # Loaded full weights require grad everywhere: that is why the manifest column exists.
    assert rows["language_model"].requires_grad == rows["language_model"].params
    assert not any(r.lora or r.quantized for r in rows.values())

    assert main(["inspect", f"{r3}:vision"]) == 0
    out = capsys.readouterr().out
    assert "trained by stage" in out and "requires_grad" in out
    assert "the stage trained: vision_tower, projector" in out


def test_llm_stage_has_lora_on_the_language_model_only(r3):
    result = inspect_target(resolve_target(str(_stage_output(r3, "llm"))), InspectOptions())
    rows = result.rows
    assert rows["language_model"].lora
    assert all(not rows[p].lora for p in ("vision_tower", "projector", "embeddings", "lm_head"))
    assert rows["lm_head"].saved  # trained in full through modules_to_save
    assert rows["language_model"].stage_trainable > 0
    assert rows["vision_tower"].stage_trainable == 0
    assert result.adapters == ["`default` r=16"]
    assert "load_in_4bit=true to see it as trained" in render(result)


def test_llm_stage_loaded_in_4bit_as_trained(r3):
    rows = _inspect(f"{r3}:llm", load_in_4bit=True).rows
    assert "uint8" in rows["language_model"].dtypes and rows["language_model"].quantized
    assert rows["language_model"].lora


def test_model_entry_builds_on_meta_and_4bit_quantizes_the_language_model_only():
    meta = _inspect("tiny-qwen2-vl")
    assert meta.rows["total"].devices == ["meta"]
    quantized = _inspect("tiny-qwen2-vl", load_in_4bit=True).rows
    assert "uint8" in quantized["language_model"].dtypes
    assert len(quantized["language_model"].quantized) > 0
    for part in ("vision_tower", "projector", "embeddings", "lm_head"):
        assert set(quantized[part].dtypes) <= FLOATS, part
        assert not quantized[part].quantized


def test_two_targets_side_by_side_with_differences(r3, capsys):
    args = ["inspect", f"{r3}:vision", "tiny-qwen2-vl", "b.load_in_4bit=true"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A: {r3}:vision")
    assert "B: tiny-qwen2-vl" in out
    assert "differences (" in out
    assert "language_model quantized: - -> 14 modules" in out


def test_save_pretrained_folder(r3, tmp_path):
    result = inspect_target(resolve_target(str(_stage_output(r3, "vision"))), InspectOptions())
    plain = tmp_path / "plain"  # the stage's files without its manifest
    shutil.copytree(_stage_output(r3, "vision"), plain)
    (plain / "manifest.json").unlink()
    folder = inspect_target(resolve_target(str(plain)), InspectOptions())
    assert folder.description[0].startswith("save_pretrained folder")
    assert folder.rows["total"].params == result.rows["total"].params
    assert folder.rows["total"].stage_trainable is None
    assert "no quantized modules" in render_pair(result, folder)


def _error(text: str) -> str:
    with pytest.raises(RecipeError) as caught:
        inspect_target(resolve_target(text), InspectOptions())
    return str(caught.value)


def test_unusable_targets_are_clear_errors(r3, tmp_path):
    assert "path does not exist" in _error(str(tmp_path / "nope"))
    assert "Did you mean `tiny-qwen2-vl`" in _error("tiny-qwen2vl")
    assert "has no stage `vsion`. Did you mean `vision`?" in _error(f"{r3}:vsion")
    assert "name one" in _error(str(r3))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no config.json" in _error(str(empty))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "manifest.json").write_text("{not json")
    assert "manifest.json is corrupt" in _error(str(broken))
    orphan = tmp_path / "orphan"
    shutil.copytree(_stage_output(r3, "llm"), orphan)
    manifest = json.loads((orphan / "manifest.json").read_text())
    manifest["base_location"] = str(tmp_path / "gone")
    (orphan / "manifest.json").write_text(json.dumps(manifest))
    assert "no longer exists" in _error(str(orphan))
    truncated = tmp_path / "truncated"
    shutil.copytree(_stage_output(r3, "vision"), truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # a copy that stopped short
    message = _error(str(truncated))
    assert "model.safetensors is damaged or truncated" in message and "force=[vision]" in message


def test_hub_entry_offline_is_a_clear_error():
    assert "could not be read" in _error("qwen2-vl-7b")
