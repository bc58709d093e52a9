"""A distilling stage trains on CPU: its teacher (a LoRA stage of a larger model, merged) is
loaded frozen beside it, TRL's DistillationTrainer trains the student a few steps, and the
stage commits its weights (that a fresh interpreter commits the same weights under the same
key is checked with the resumed stage: tests/run/test_preference_resume.py). A model is a
teacher too: an evaluation stage of it."""

from __future__ import annotations

import json
from pathlib import Path

from engine_cli import forked_engine

USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")

SHORT = (
    "recipe=r8-distill-text",
    "data.max_samples=32",
    "stage.distill.data.max_samples=16",
    "++stage.llm.train.max_steps=2",
    "++stage.teacher.train.max_steps=2",
    "stage.distill.train.max_steps=3",
    "stage.distill.train.per_device_train_batch_size=4",
    "stage.distill.train.max_completion_length=4",
    "stage.distill.train.save_steps=2",
    "stage.distill.train.logging_steps=1",
    "eval.enabled=false",  # the weights are the question; evaluation has its own tests
    "eval.compare=false",
)


def manifests(output_root: Path) -> dict[str, tuple[Path, dict]]:
    """{stage: (its store folder, its manifest)} of what the run committed."""
    found = {}
    for path in output_root.glob("store/*/manifest.json"):
        manifest = json.loads(path.read_text())
        found[manifest["stage"]] = (path.parent, manifest)
    return found


def test_a_distilling_stage_trains_from_its_teacher(tmp_path):
    first = forked_engine(*SHORT, f"output_root={tmp_path / 'a'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    said = first.stdout + first.stderr
    assert "stage distill: loading its teacher" in said and ".merged-float32" in said
    committed = manifests(tmp_path / "a")
    assert set(committed) == {"llm", "teacher", "distill"}
    manifest = committed["distill"][1]
    assert manifest["config"]["trainer"] == "distill"
    assert manifest["config"]["teacher"] == {"from_stage": "teacher"}
    assert manifest["metrics"]["steps"] == 3
    losses = manifest["metrics"]["train_losses"]
    assert losses and all(loss == loss for loss in losses)  # logged, finite
    # The same key's weights bit for bit from another interpreter: a killed distilling stage
    # resumed against an uninterrupted one in a fresh interpreter, in
    # tests/run/test_preference_resume.py, checks it.


def test_a_model_is_a_teacher_as_an_evaluation_stage_of_it(tmp_path):
    """The teacher stage evaluates `tiny-qwen2-large` and trains nothing; the distilling stage
    loads the model it evaluated (the tiny model's folder, not a store entry) as its teacher."""
    args = [a for a in SHORT if not a.startswith(("recipe=", "++stage.teacher"))]
    done = forked_engine(
        "--config-dir",
        USER_RECIPES,
        "recipe=user-distill-from-model",
        *args,
        f"output_root={tmp_path / 'out'}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    [loaded] = [line for line in said.splitlines() if "stage distill: loading its teacher" in line]
    assert "tiny-qwen2-large" in loaded and "/store/" not in loaded
    committed = manifests(tmp_path / "out")
    assert committed["teacher"][1]["format"] == "evaluation"
    assert committed["distill"][1]["metrics"]["steps"] == 3
