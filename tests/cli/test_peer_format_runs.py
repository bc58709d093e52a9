"""A user's file from another tool trains as it is: every file of `peer_files.PEER_FILES`
(LLaMA-Factory, Axolotl, ms-swift, TRL, Anthropic HH, each written as its documentation shows)
goes through the command line with no format, mapping, split or trainer set: it trains two
steps with the trainer its rows are for and is evaluated on the rows held out of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peer_files import (
    PEER_FILES,
    model_with_template,
    ms_pretrain,
    ms_qwen_vl_query_response,
    trl_tool_calling,
)

from recipe_engine.cli.main import main
from recipe_engine.store.records import Manifest, StageRow

pytestmark = pytest.mark.usefixtures("judge_kept_between_runs")

QUICK = ["stage.{stage}.train.max_steps=2", "eval.max_samples=2", "eval.max_new_tokens=4"]
QUICK += ["eval.compare=false"]
# In the user's world: real checkpoints are bfloat16, so every peer file trains a bf16 model.
BF16 = "model.dtype=bfloat16"
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
    if peer.template:  # the tiny model with the chat template the rows need
        folder = model_with_template(tmp_path, peer.template)
        overrides = [*overrides, "model.source=local", f"model.id={folder}"]
    # Language-modeling text asks no question: the run's compare is skipped, not failed (a
    # failed one would make the run incomplete, exit 1).
    asks = peer.shape != "language_modeling"
    quick = QUICK if asks else QUICK[:-1]
    argv = [
        f"recipe={recipe}",
        "data.source=local",
        f"data.path={peer.write(tmp_path)}",
        f"output_root={tmp_path / 'out'}",
        *overrides,
        BF16,
        *(setting.format(stage=stage) for setting in quick),
    ]
    assert main(argv) == 0
    [run_dir] = (tmp_path / "out" / "runs" / recipe).iterdir()
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert row["status"] == "trained" and row["steps"] == 2, row
    # Evaluated on the rows held out of the file: exact match where the rows ask something,
    # the held-out loss alone of language-modeling text.
    assert row["eval"].startswith("acc " if asks else "loss "), row
    manifest = Manifest.load(StageRow(**row).output_path(run_dir))
    assert manifest.config["trainer"] == peer.trainer  # the one its rows call for
    assert manifest.dtype == "bfloat16"


def test_tool_rows_for_a_template_that_cannot_render_tools_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny Qwen2's chat template leaves calls and tool turns out: one message, exit 2,
    nothing written."""
    argv = [
        "plan",
        "recipe=text-lora",
        "data.source=local",
        f"data.path={trl_tool_calling(tmp_path)}",
        f"output_root={tmp_path / 'out'}",
    ]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "the chat template of `tiny-qwen2` does not render them" in error
    assert "Use a model whose chat template supports tools" in error
    assert not (tmp_path / "out").exists()


def test_ms_swift_pretraining_rows_are_planned_as_language_modeling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `response` alone (trained above as `ms-pretrain`): `plan` names the format it read."""
    argv = [
        "plan",
        "recipe=text-lora",
        "data.source=local",
        f"data.path={ms_pretrain(tmp_path)}",
        f"output_root={tmp_path / 'out'}",
    ]
    assert main(argv) == 0
    assert "swift_pretrain (`response` as text) as language_modeling" in capsys.readouterr().out


def test_qwen_vl_tagged_rows_train_the_vision_stage_of_r3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ms-swift's Qwen-VL rows name their pictures with `<img>` tags in `query`: `plan` says
    they carry images, and r3's vision stage (which trains only the vision tower and the
    projector, so rows without images are refused) trains on them, with no setting but a
    short run, and is evaluated on the rows held out of the file."""
    argv = [
        "recipe=r3-two-stage",
        "data.source=local",
        f"data.path={ms_qwen_vl_query_response(tmp_path)}",
        f"output_root={tmp_path / 'out'}",
    ]
    assert main(["plan", *argv]) == 0
    planned = capsys.readouterr().out
    assert "qwen_vl with images (`query` as prompt; `response` as completion) as vlm" in planned
    assert main([*argv, "only=[vision]", *(s.format(stage="vision") for s in QUICK)]) == 0
    [run_dir] = (tmp_path / "out" / "runs" / "r3-two-stage").iterdir()
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert (row["stage"], row["status"], row["steps"]) == ("vision", "trained", 2), row
    assert row["eval"].startswith("acc "), row
