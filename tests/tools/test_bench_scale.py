"""`make bench-scale`: the recipes at real families' dimensions, and the memory estimate there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tools.bench_scale import Run, Settings, main, overrides, scale_shapes
from tools.scale_models import SCALE_MODELS, Variant, build_scale_model

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_is_the_recipe_as_a_user_runs_it_at_the_familys_size(tmp_path):
    """Every stage a few steps at the batch asked, the pictures at a real size, and a tied
    family's lm_head frozen with its embeddings (what plan's refusal tells a user)."""
    args = overrides(Run("r3-two-stage", "qwen2-vl-2b"), Settings(steps=3, batch=4), None, tmp_path)
    assert "model=qwen2-vl-2b" in args  # planned from the shipped snapshot (a dry run)
    assert {"++stage.vision.train.max_steps=3", "++stage.llm.train.max_steps=3"} <= set(args)
    assert "stage.llm.freeze.components=[vision_tower,projector,embeddings,lm_head]" in args
    assert not any(a.startswith("stage.vision.freeze") for a in args)  # froze both already
    [data] = [a.removeprefix("data.path=") for a in args if a.startswith("data.path=")]
    rows = [json.loads(line) for line in Path(data).read_text().splitlines()]
    with Image.open(Path(data).parent / rows[0]["images"][0]) as picture:
        assert picture.size == (448, 448)
    assert scale_shapes(448) == Path(data).parent
    assert SCALE_MODELS["qwen2-vl-2b"].pixel_limits() == {"min_pixels": 3136,
                                                          "max_pixels": 12845056}  # fmt: skip
    with pytest.raises(SystemExit, match="one of"):
        Run.parse("r3-two-stage@qwen2-vl-3b")


def test_the_dry_run_plans_each_run_in_seconds_and_says_what_its_plan_said(tmp_path, capsys):
    """`--dry-run` builds no model: each run is planned from its family's shipped snapshot and
    the table says its estimate, the visual tokens per picture its processor gives at the
    size asked (224 px: 16 x 16 patches of 14 px, merged 2 x 2), and that the tied family's
    lm_head is frozen with its embeddings; a run its plan refuses says why (the engine's
    message, on stderr) and the bench goes on to the next."""
    out = tmp_path / "dry.json"
    runs = "r1-llm-only@qwen2-vl-2b,text-lora@qwen2.5-0.5b"
    argv = ["--dry-run", "--runs", runs, "--image-px", "224", "--work", str(tmp_path)]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "$ python -m recipe_engine recipe=r1-llm-only model=qwen2-vl-2b" in printed
    vlm, text = json.loads(out.read_text())["runs"]
    assert vlm["exit_code"] == 0 and vlm["stages"] == [] and vlm["notes"][0].startswith("memory: ~")
    assert "images: 224x224 px -> 64 visual tokens each (processor: max_pixels 12,845,056" in (
        " ".join(vlm["notes"])
    )
    assert "qwen2-vl-2b ties lm_head to its embeddings: frozen with them" in vlm["notes"]
    assert not any(note.startswith("images:") for note in text["notes"])
    assert main([*argv, "--batch", "0"]) == 2
    printed = capsys.readouterr().out
    for run in runs.split(","):
        assert f"{run}: exit 2" in printed
    assert "`stage.llm.train.per_device_train_batch_size` is 0; it must be a positive" in printed


def test_a_scale_model_has_the_familys_widths_and_its_tiny_siblings_tokens():
    from transformers import AutoConfig, AutoProcessor

    folder = build_scale_model("qwen2-vl-2b", Variant(depth=1))
    config = AutoConfig.from_pretrained(folder)
    text = config.text_config
    assert (text.hidden_size, text.intermediate_size, text.vocab_size) == (1536, 8960, 151936)
    assert (text.num_hidden_layers, config.vision_config.depth) == (1, 1)
    assert config.vision_config.embed_dim == 1280 and config.tie_word_embeddings
    processor = AutoProcessor.from_pretrained(folder)
    assert processor.tokenizer.convert_ids_to_tokens(config.image_token_id) == "<|image_pad|>"
    assert processor.image_processor.size["longest_edge"] == 12845056


def test_at_a_real_familys_widths_the_estimate_is_on_the_safe_side(tmp_path):
    """Qwen2-VL-2B's widths (a 1536-wide language model, 1280-wide vision blocks, 151,936
    tied embeddings) and Qwen2.5-0.5B's, one layer each, 224 px pictures, through the command
    line: every stage of r3 and text-lora is planned within 15% above its measured peak and
    never more than 5% under it (the unsafe side). Two steps: the estimate's peak is a step's
    with the optimizer state of the steps before it. At full depth `make bench-scale` prints
    the same at 2 B parameters. In the dtype the engine chooses here (`--dtype auto`):
    bfloat16, or float32 on a CPU that emulates bfloat16 (as a user's run there would)."""
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench_scale", "--runs",
         "r3-two-stage@qwen2-vl-2b,text-lora@qwen2.5-0.5b", "--depth", "1", "--steps", "2",
         "--image-px", "224", "--eval-samples", "2", "--out", str(out),
         "--work", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    stages = [(run["run"], stage) for run in runs for stage in run["stages"]]
    assert [stage["stage"] for _, stage in stages] == ["vision", "llm", "llm"]
    for run, stage in stages:
        error = 100 * (stage["planned_gib"] / stage["measured_gib"] - 1)
        assert -5 <= error <= 15, (run, stage)
