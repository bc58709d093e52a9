"""A user's file from another tool trains as it is: every file of `peer_files.PEER_FILES`
(LLaMA-Factory, Axolotl, ms-swift, TRL, Anthropic HH, each written as its documentation shows)
goes through the command line with no format, mapping, split or trainer set: it trains two
steps with the trainer its rows are for and is evaluated on the rows held out of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peer_files import PEER_FILES

from recipe_engine.cli.main import main
from recipe_engine.store.records import Manifest, StageRow

QUICK = ["stage.{stage}.train.max_steps=2", "eval.max_samples=2", "eval.max_new_tokens=4"]
QUICK += ["eval.compare=false"]
# The recipe each kind of model trains on, and its stage: LoRA on a text model; LoRA on both
# towers of a tiny Qwen2-VL, unquantized (the fastest VLM stage).
RECIPES = {
    "causal_lm": ("text-lora", "llm", []),
    "vlm": ("r4-joint", "joint", ["stage.joint.quantization=null"]),
}


@pytest.mark.parametrize("name", PEER_FILES)
def test_a_peer_file_trains_with_no_setting(name: str, tmp_path: Path) -> None:
    peer = PEER_FILES[name]
    recipe, stage, overrides = RECIPES[peer.kind]
    argv = [
        f"recipe={recipe}",
        "data.source=local",
        f"data.path={peer.write(tmp_path)}",
        f"output_root={tmp_path / 'out'}",
        *overrides,
        *(setting.format(stage=stage) for setting in QUICK),
    ]
    assert main(argv) == 0
    [run_dir] = (tmp_path / "out" / "runs" / recipe).iterdir()
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert row["status"] == "trained" and row["steps"] == 2, row
    assert row["eval"].startswith("acc "), row  # evaluated on the rows held out of the file
    manifest = Manifest.load(StageRow(**row).output_path(run_dir))
    assert manifest.config["trainer"] == peer.trainer  # the one its rows call for
