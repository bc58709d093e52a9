"""The suite's way of running the engine as a user does (tests/engine_cli.py): a command
forked from the imported engine behaves as the same command in a fresh interpreter."""

from __future__ import annotations

import subprocess

import pytest
from engine_cli import ForkedEngine, engine, forked_engine


def test_a_forked_refusal_is_the_fresh_interpreters_exit_code_and_words(tmp_path):
    typo = ("plan", "recipe=r3-typo", "output_root=out")
    fresh = engine(*typo, cwd=tmp_path, fresh=True)
    forked = forked_engine(*typo, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert forked.returncode == 2 and forked.stderr.startswith("error: Unknown recipe")
    assert list(tmp_path.iterdir()) == []


def test_a_forked_command_past_its_time_is_killed_and_the_next_one_runs(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        forked_engine("recipe=text-lora", "output_root=out", cwd=tmp_path, timeout=1)
    server = ForkedEngine._shared
    assert server is not None and server.process.poll() is None
    done = forked_engine("plan", "recipe=text-lora", "output_root=out", cwd=tmp_path)
    assert done.returncode == 0 and "text-lora" in done.stdout
