"""`python -m recipe_engine ...` end to end through Hydra's entry point, as `make run` runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from engine_cli import engine


def test_run_through_hydra_with_a_relative_output_root(tmp_path):
    short = [
        "recipe=text-lora",
        "output_root=out",
        "data.max_samples=32",
        "eval.max_samples=4",
        "stage.llm.train.max_steps=3",
    ]
    first = engine(*short, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    [run_dir] = (tmp_path / "out" / "runs" / "text-lora").iterdir()
    assert (run_dir / ".hydra" / "config.yaml").is_file()  # Hydra's resolved config
    assert (run_dir / ".recipe-engine").is_file()  # what `runs rm` recognises
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["trained"]
    for name in ("compare.md", "compare.csv", "loss.png"):
        assert (run_dir / name).is_file(), name
    assert "exact_match" in first.stdout and "compare report" in first.stdout
    # The plan's memory breakdown, logged beside the peak training used (bench-memory reads it).
    planned = (r"stage llm: memory planned ~[\d.]+ MiB peak on cpu \(weights [\d.]+.*\); "
               r"measured ([\d.]+) MiB \(live tensor bytes")  # fmt: skip
    logged = re.search(planned, first.stdout + first.stderr)
    assert logged and float(logged[1]) > 0, first.stdout[-3000:]

    # The cached rerun, through the same entry point, reporting what it imported.
    rerun = (
        "import sys\n"
        "from hydra._internal.config_loader_impl import ConfigLoaderImpl as Loader\n"
        "composed, compose = [], Loader.load_configuration\n"
        "Loader.load_configuration = lambda *a, **k: composed.append(1) or compose(*a, **k)\n"
        "from recipe_engine.cli.main import main; code = main(sys.argv[1:])\n"
        "print('compositions:', len(composed))\n"
        "print('heavy imports:', sorted({'torch', 'transformers', 'datasets'} & set(sys.modules)))"
    )
    second = subprocess.run(
        [sys.executable, "-c", rerun, *short],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "heavy imports: []" in second.stdout  # a cached rerun loads no torch
    assert "compositions: 1" in second.stdout  # the run composed its config once
    newest = max((tmp_path / "out" / "runs" / "text-lora").iterdir())
    assert newest != run_dir
    summary = json.loads((newest / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["cached"]
    assert "all stages cached" in second.stdout


def test_training_that_diverges_exits_1_with_one_message_and_commits_nothing(tmp_path):
    diverging = engine(
        "recipe=text-lora",
        "output_root=out",
        "data.max_samples=32",
        "eval.max_samples=4",
        "stage.llm.train.max_steps=3",
        "stage.llm.train.logging_steps=1",
        "stage.llm.train.learning_rate=1e30",
        cwd=tmp_path,
    )
    assert diverging.returncode == 1, diverging.stderr[-3000:]
    assert "Traceback" not in diverging.stderr
    [message] = [line for line in diverging.stderr.splitlines() if line.startswith("error: ")]
    assert "stopped at step" in message and "learning_rate is 1e+30" in message
    store = tmp_path / "out" / "store"
    assert not [entry for entry in store.iterdir() if (entry / "COMPLETE").exists()]
