"""Online stages as a user runs them: GRPO on prompts written as TRL documents them (chat
prompts with a `solution` column, a user's reward function in their own file), on a text model
and on a vision-language model with pictures, both bfloat16 as real checkpoints are; the
rewards land in the stage's metrics under their names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe_engine.cli.main import main
from recipe_engine.store.records import Manifest, StageRow

ROOT = Path(__file__).resolve().parents[2]
USER_RECIPES = str(ROOT / "tests" / "fixtures" / "recipes")
# A reward as TRL's docs write one: the columns arrive by name, completions are messages.
REWARD = """
def solved(prompts, completions, solution, **kwargs):
    return [float(s in c[-1]["content"]) for c, s in zip(completions, solution)]
"""
QUICK = [
    "stage.grpo.train.max_steps=2",
    "stage.grpo.train.per_device_train_batch_size=4",
    "stage.grpo.train.num_generations=2",
    "stage.grpo.train.max_completion_length=4",
    "model.dtype=bfloat16",
    "eval.max_samples=2",
    "eval.max_new_tokens=4",
    "eval.compare=false",
]


def prompts(folder: Path, images: bool) -> Path:
    """TRL's conversational prompt rows (`prompt` messages ending with a user turn) with the
    reference in `solution`, as its GRPO guide's datasets have them; pictures for a VLM."""
    rows = []
    for i in range(12):
        row = {
            "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
            "solution": str(i + 1),
        }
        if images:
            from PIL import Image

            Image.new("RGB", (56, 56), (20 * i, 0, 0)).save(folder / f"{i}.png")
            row = {"images": [f"{i}.png"], "prompt": "What colour is it?", "solution": "red"}
        rows.append(row)
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# (model, trainer, what the stage trains): LoRA GRPO on a vision-language model (on text:
# r7-sft-grpo in tests/run/test_preference_resume.py); a full RLOO fine-tune of a text model
# (TRL's default beta 0.05), whose reference TRL loads itself by the name in the policy's
# config, which the engine points at the folder the stage loaded.
RUNS = {
    "grpo vlm": ("tiny-qwen2-vl", "grpo", []),
    "rloo full": (
        "tiny-qwen2",
        "rloo",
        ["stage.grpo.lora=null", "stage.grpo.freeze.components=[]"],
    ),
}


@pytest.mark.parametrize("run", RUNS)
def test_an_online_stage_trains_a_bf16_model_on_the_users_prompts_and_reward(
    run, tmp_path, monkeypatch
):
    model, trainer, policy = RUNS[run]
    monkeypatch.chdir(tmp_path)  # the reward file is named relative to where the user runs
    (tmp_path / "my_rewards.py").write_text(REWARD)
    data = prompts(tmp_path, images=model.endswith("-vl"))
    argv = [
        "--config-dir",
        USER_RECIPES,
        "recipe=user-grpo",
        f"model={model}",
        f"data.path={data}",
        "data.source=local",
        f"output_root={tmp_path / 'out'}",
        "stage.grpo.rewards=[{fn:my_rewards.py:solved},{name:length_penalty,max_length:8}]",
        f"stage.grpo.trainer={trainer}",
        *policy,
        *QUICK,
    ]
    assert main(argv) == 0
    [run_dir] = (tmp_path / "out" / "runs" / "user-grpo").iterdir()
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert row["status"] == "trained" and row["steps"] == 2, row
    output = StageRow(**row).output_path(run_dir)
    manifest = Manifest.load(output)
    assert manifest.dtype == "bfloat16" and manifest.config["trainer"] == trainer
    assert manifest.trainer["reward_weights"] == [1.0, 1.0]
    logged = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert {"rewards/solved/mean", "rewards/length_penalty/mean"} <= set(logged[0])
    assert not (tmp_path / "__pycache__").exists()
