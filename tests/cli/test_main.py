"""The command line: verbs, help, and every config error as one message and exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipe_engine.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
USER_RECIPES = str(ROOT / "tests" / "fixtures" / "recipes")
PROMPT_COMPLETION = str(ROOT / "tests" / "fixtures" / "data" / "prompt-completion.jsonl")


def test_help_lists_verbs_recipes_and_key_options(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("plan", "r3-two-stage", "r4-joint", "text-lora", "gpus=6,7", "parallel="):
        assert word in out


ERROR_CASES = {
    "unknown key": (["stage.llm.lroa.r=8"], ["stage.llm.lroa", "Did you mean `lora`"]),
    "misspelt recipe": (["recipe=r3-two-stag"], ["Unknown recipe `r3-two-stag`", "r3-two-stage"]),
    "wrong type": (["seed=abc"], ["seed", "abc"]),
    "stage cycle": (
        ["recipe=r3-two-stage", "stage.vision.init.from_stage=llm"],
        ["cycle", "vision -> llm -> vision"],
    ),
    "missing parent stage": (
        ["recipe=r3-two-stage", "stage.llm.init.from_stage=visoin"],
        ["stage.llm.init.from_stage", "Did you mean `vision`"],
    ),
    "duplicate stage": (
        ["--config-dir", USER_RECIPES, "recipe=user-duplicate"],
        ["`first` and `second` are duplicates"],
    ),
    "unreachable stage": (
        ["--config-dir", USER_RECIPES, "recipe=user-unreachable"],
        ["extra feed no target", "recipe.targets"],
    ),
    "nothing trainable": (
        [
            "recipe=r2-vision-only",
            "stage.vision.freeze.components=[vision_tower,projector,language_model,embeddings,lm_head]",
        ],
        ["trains nothing", "stage.vision.freeze.components"],
    ),
    "lora on a frozen component": (
        ["recipe=r1-llm-only", "stage.llm.lora.components=[vision_tower]"],
        ["vision_tower", "frozen"],
    ),
    "lora targets matching nothing": (
        ["recipe=r1-llm-only", "stage.llm.lora.target_modules=[qkv_projj]"],
        ["qkv_projj", "matches no"],
    ),
    "quantizing a fully trained component": (
        ["recipe=r1-llm-only", "stage.llm.quantization.components=[language_model,lm_head]"],
        ["lm_head", "quantiz"],
    ),
    "gpus naming a missing GPU": (["gpus=6,7", "hardware=local"], ["6", "7", "gpus"]),
    "gpus with device=cpu": (["gpus=0", "device=cpu"], ["device=cpu", "gpus"]),
    "unknown trainer argument": (
        ["stage.llm.train.learnig_rate=1e-4"],
        ["stage.llm.train.learnig_rate", "SFTConfig", "Did you mean `learning_rate`"],
    ),
    "negative learning rate": (
        ["stage.llm.train.learning_rate=-1e-4"],
        ["stage.llm.train.learning_rate", "must not be negative"],
    ),
    "zero batch size": (
        ["stage.vision.train.per_device_train_batch_size=0"],
        ["per_device_train_batch_size", "positive"],
    ),
    "model path that does not exist": (
        ["recipe=r1-llm-only", "stage.llm.init.path=missing/checkpoint-7"],
        ["stage.llm.init.path", "missing/checkpoint-7", "does not exist"],
    ),
    "unknown verb": (["pln"], ["Unknown verb `pln`", "Did you mean `plan`"]),
    "unknown key added with +": (["+seeed=3"], ["Unknown key `seeed`", "Did you mean `seed`"]),
    "trainer setting one level too high, with +": (
        ["+stage.llm.lerning_rate=1e-4"],
        ["stage.llm.lerning_rate", "Did you mean `stage.llm.train.learning_rate`"],
    ),
    "misspelt stage name in a key": (
        ["stage.lmm.train.learning_rate=1e-4"],
        ["names stage `lmm`", "Did you mean `llm`", "Stages: vision, llm"],
    ),
    "infinite learning rate": (
        ["stage.llm.train.learning_rate=inf"],
        ["stage.llm.train.learning_rate", "finite"],
    ),
    "nan lora dropout": (
        ["recipe=r1-llm-only", "stage.llm.lora.lora_dropout=nan"],
        ["stage.llm.lora.lora_dropout", "finite"],
    ),
    "prompt/completion rows with assistant-only loss": (
        [
            "recipe=text-lora",
            "data.source=local",
            f"data.path={PROMPT_COMPLETION}",
            "data.format=auto",
        ],
        ["prompt/completion rows", "stage.llm.train.assistant_only_loss=false"],
    ),
    "evaluation stage without a held-out split": (
        [
            "--config-dir",
            USER_RECIPES,
            "recipe=user-with-eval",
            "data.eval_split=null",
        ],
        ["Evaluation stage `eval` needs a held-out split", "data.eval_fraction"],
    ),
}


@pytest.mark.parametrize("verb", ["plan", "run"])
@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_config_errors_are_one_message_and_exit_2(case, verb, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written would land here
    args, expected = ERROR_CASES[case]
    argv = args if case == "unknown verb" else [verb, *args, f"output_root={tmp_path / 'out'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, f"{text!r} not in {err!r}"
    assert list(tmp_path.iterdir()) == [], "a failed run must write nothing"


def test_exact_command_line_fails_cleanly_without_those_gpus(tmp_path):
    """`python -m recipe_engine recipe=r3-two-stage gpus=6,7` on a machine without GPUs 6 and 7."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CUDA_VISIBLE_DEVICES")
    result = subprocess.run(
        [sys.executable, "-m", "recipe_engine", "recipe=r3-two-stage", "gpus=6,7"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(message) == 1 and "6" in message[0] and "gpus" in message[0]
    assert list(tmp_path.iterdir()) == []


def test_bad_data_row_names_file_and_row_and_writes_nothing(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data" / "train.jsonl"
    data.parent.mkdir()
    good = json.dumps(
        {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}
    )
    data.write_text(good + "\n" + '{"messages": [{"role": "user", "content": "2+2?"}]}\n')
    monkeypatch.chdir(tmp_path)
    argv = ["recipe=text-lora", "data.source=local", f"data.path={data}", "output_root=out"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(data) in err and "row 2" in err and "assistant" in err
    assert not (tmp_path / "out").exists()
