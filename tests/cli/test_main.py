"""The command line: verbs, help, and the exact command lines users type (the bad-input
catalogue is tests/cli/test_bad_inputs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recipe_engine.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_verbs_recipes_and_key_options(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("plan", "r3-two-stage", "r4-joint", "text-lora", "gpus=6,7", "parallel="):
        assert word in out


EXIT_PROBE = """
import atexit, gc, sys
from recipe_engine.cli.main import console
atexit.register(lambda: print("atexit ran; frozen:", gc.get_freeze_count() > 0))
sys.argv = ["recipe-engine", "--help"]
sys.exit(console())
"""


def test_a_command_leaves_what_it_imported_frozen_for_the_shutdown_and_atexit_still_runs():
    """What is alive at the end is frozen out of the shutdown's garbage collection (seconds
    over a training stack, for nothing); the atexit handlers still run after it."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "atexit ran; frozen: True"


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
