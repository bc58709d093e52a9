"""A DPO stage killed mid-step resumes from its last checkpoint and commits the same weights,
bit for bit, as a run that was never interrupted (its reference, the adapter-disabled base,
is the same after the resume: nothing of it is checkpointed or needs to be)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

HELPER = """
import os, signal, sys
STEP = int(os.environ.get("FAULT_STEP", "0"))
import trl
from transformers import Trainer
real_step = Trainer.training_step
def training_step(self, *args, **kwargs):
    loss = real_step(self, *args, **kwargs)  # forward + backward of step global_step + 1
    if STEP and isinstance(self, trl.DPOTrainer) and self.state.global_step + 1 == STEP:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # before the optimizer step of STEP
    return loss
Trainer.training_step = training_step
from recipe_engine.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
SHORT = (
    "recipe=r5-sft-dpo-text",
    "data.max_samples=32",
    "stage.dpo.data.max_samples=48",
    "++stage.llm.train.max_steps=2",
    "++stage.dpo.train.max_steps=6",
    "stage.dpo.train.save_steps=2",
    "stage.dpo.train.per_device_train_batch_size=4",
    "eval.max_samples=4",
)


def engine(tmp_path: Path, output_root: Path, fault_step: int = 0) -> subprocess.CompletedProcess:
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    return subprocess.run(
        [sys.executable, str(helper), *SHORT, f"output_root={output_root}"],
        env={**os.environ, "FAULT_STEP": str(fault_step)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def dpo_weights(output_root: Path) -> str:
    import json

    for manifest in output_root.glob("store/*/manifest.json"):
        if json.loads(manifest.read_text())["stage"] == "dpo":
            weights = manifest.parent / "adapter_model.safetensors"
            return hashlib.sha256(weights.read_bytes()).hexdigest()
    raise AssertionError(f"no committed dpo stage under {output_root}")


def test_a_killed_dpo_stage_resumes_and_commits_the_uninterrupted_weights(tmp_path):
    killed = engine(tmp_path, tmp_path / "a", fault_step=5)
    assert killed.returncode == -signal.SIGKILL
    resumed = engine(tmp_path, tmp_path / "a")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert "stage dpo: resuming from" in said and "checkpoint-4" in said
    clean = engine(tmp_path, tmp_path / "b")
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert dpo_weights(tmp_path / "a") == dpo_weights(tmp_path / "b")
