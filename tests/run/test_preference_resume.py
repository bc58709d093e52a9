"""A preference, online or distilling stage (DPO, KTO, GRPO, distillation) killed mid-step
resumes from its last checkpoint and commits the same weights, bit for bit, as a run that was
never interrupted (its reference, the adapter-disabled base, is the same after the resume:
nothing of it is checkpointed or needs to be; KTO's KL pairs are formed from the rows in their
order, the same after the resume; GRPO's completions lost with the killed process are generated
again from the random state the checkpoint saved: a generation batch spans one step here, the
default; a distilling stage's teacher is loaded again from the store, frozen)."""

from __future__ import annotations

import hashlib
import signal
import subprocess
from pathlib import Path

import pytest
from engine_cli import engine, forked_engine, single_thread_env

# Run first in a forked engine (tests/forked_engine.py): kills it inside step FAULT_STEP of the
# FAULT_TRAINER stage.
PRELUDE = """
import os, signal, sys
STEP = int(os.environ["FAULT_STEP"])
import trl
from transformers import Trainer
KILLED = getattr(trl, os.environ["FAULT_TRAINER"])
real_step = Trainer.training_step
def training_step(self, *args, **kwargs):
    loss = real_step(self, *args, **kwargs)  # forward + backward of step global_step + 1
    if isinstance(self, KILLED) and self.state.global_step + 1 == STEP:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # before the optimizer step of STEP
    return loss
Trainer.training_step = training_step
"""


def short(recipe: str, stage: str) -> tuple[str, ...]:
    """The recipe's SFT stage for two steps, then its preference or online stage `stage` for
    six."""
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
        *ONLINE.get(stage, ()),
    )


# The stage's name -> its recipe and TRL's trainer class.
KILLED = {
    "dpo": ("r5-sft-dpo-text", "DPOTrainer"),
    "kto": ("r6-sft-kto-text", "KTOTrainer"),
    "grpo": ("r7-sft-grpo", "GRPOTrainer"),
    "distill": ("r8-distill-text", "DistillationTrainer"),
}
# An online stage's batch of 4 completions: 2 prompts answered twice each, 4 tokens long; a
# distilling stage's: 4 prompts answered once (its batch, per_device_train_batch_size=4).
ONLINE = {
    "grpo": ("stage.grpo.train.num_generations=2", "stage.grpo.train.max_completion_length=4"),
    "distill": ("stage.distill.train.max_completion_length=4",),
}


def killed_at(
    tmp_path: Path, output_root: Path, stage: str, step: int
) -> subprocess.CompletedProcess:
    """The stage's run, SIGKILLed inside training step `step`."""
    prelude = tmp_path / "kill_at_step.py"
    prelude.write_text(PRELUDE)
    recipe, trainer = KILLED[stage]
    return forked_engine(
        *short(recipe, stage),
        f"output_root={output_root}",
        cwd=tmp_path,
        env={"FAULT_STEP": str(step), "FAULT_TRAINER": trainer},
        prelude=prelude,
    )


def run(tmp_path: Path, output_root: Path, stage: str, fresh: bool) -> subprocess.CompletedProcess:
    """The stage's run, forked or in a fresh interpreter; on one OpenMP thread either way."""
    recipe, _ = KILLED[stage]
    args = (*short(recipe, stage), f"output_root={output_root}")
    if fresh:
        return engine(*args, cwd=tmp_path, env=single_thread_env(), fresh=True)
    return forked_engine(*args, cwd=tmp_path)


def stage_weights(output_root: Path, stage: str) -> str:
    import json

    for manifest in output_root.glob("store/*/manifest.json"):
        if json.loads(manifest.read_text())["stage"] == stage:
            weights = manifest.parent / "adapter_model.safetensors"
            return hashlib.sha256(weights.read_bytes()).hexdigest()
    raise AssertionError(f"no committed {stage} stage under {output_root}")


@pytest.mark.parametrize("stage", KILLED)
def test_a_killed_stage_resumes_and_commits_the_uninterrupted_weights(tmp_path, stage):
    killed = killed_at(tmp_path, tmp_path / "a", stage, step=5)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = run(tmp_path, tmp_path / "a", stage, fresh=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert f"stage {stage}: resuming from" in said and "checkpoint-4" in said
    # A fresh interpreter (its own hash seed, nothing inherited from the forked engine)
    clean = run(tmp_path, tmp_path / "b", stage, fresh=True)
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert stage_weights(tmp_path / "a", stage) == stage_weights(tmp_path / "b", stage)
