"""A preference stage (DPO, KTO) killed mid-step resumes from its last checkpoint and commits
the same weights, bit for bit, as a run that was never interrupted (its reference, the
adapter-disabled base, is the same after the resume: nothing of it is checkpointed or needs to
be; KTO's KL pairs are formed from the rows in their order, the same after the resume)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = """
import os, signal, sys
STEP = int(os.environ.get("FAULT_STEP", "0"))
import trl
from transformers import Trainer
KILLED = getattr(trl, os.environ["FAULT_TRAINER"])
real_step = Trainer.training_step
def training_step(self, *args, **kwargs):
    loss = real_step(self, *args, **kwargs)  # forward + backward of step global_step + 1
    if STEP and isinstance(self, KILLED) and self.state.global_step + 1 == STEP:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # before the optimizer step of STEP
    return loss
Trainer.training_step = training_step
from recipe_engine.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def short(recipe: str, stage: str) -> tuple[str, ...]:
    """The recipe's SFT stage for two steps, then its preference stage `stage` for six."""
    return (
        f"recipe={recipe}",
        "data.max_samples=32",
        f"stage.{stage}.data.max_samples=48",
        "++stage.llm.train.max_steps=2",
        f"++stage.{stage}.train.max_steps=6",
        f"stage.{stage}.train.save_steps=2",
        f"stage.{stage}.train.per_device_train_batch_size=4",
        "eval.enabled=false",  # the weights are the question; evaluation has its own tests
        "eval.compare=false",
    )


# The preference stage's name -> its recipe and TRL's trainer class.
PREFERENCE = {"dpo": ("r5-sft-dpo-text", "DPOTrainer"), "kto": ("r6-sft-kto-text", "KTOTrainer")}


def engine(
    tmp_path: Path, output_root: Path, stage: str, fault_step: int = 0
) -> subprocess.CompletedProcess:
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    recipe, trainer = PREFERENCE[stage]
    return subprocess.run(
        [sys.executable, str(helper), *short(recipe, stage), f"output_root={output_root}"],
        env={**os.environ, "FAULT_STEP": str(fault_step), "FAULT_TRAINER": trainer},
        capture_output=True,
        text=True,
        timeout=600,
    )


def stage_weights(output_root: Path, stage: str) -> str:
    import json

    for manifest in output_root.glob("store/*/manifest.json"):
        if json.loads(manifest.read_text())["stage"] == stage:
            weights = manifest.parent / "adapter_model.safetensors"
            return hashlib.sha256(weights.read_bytes()).hexdigest()
    raise AssertionError(f"no committed {stage} stage under {output_root}")


@pytest.mark.parametrize("stage", PREFERENCE)
def test_a_killed_preference_stage_resumes_and_commits_the_uninterrupted_weights(tmp_path, stage):
    killed = engine(tmp_path, tmp_path / "a", stage, fault_step=5)
    assert killed.returncode == -signal.SIGKILL
    resumed = engine(tmp_path, tmp_path / "a", stage)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert f"stage {stage}: resuming from" in said and "checkpoint-4" in said
    clean = engine(tmp_path, tmp_path / "b", stage)
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert stage_weights(tmp_path / "a", stage) == stage_weights(tmp_path / "b", stage)
