"""`compare recipes=[r3-two-stage,r5-sft-dpo]`: r5 reuses r3's two stages from the store, and
both final stages are judged on r5's held-out preference pairs (rewards against the shared
base) beside exact match on the shared probes; the experiment says which has the higher
reward accuracy, and whether beyond the noise."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from engine_cli import engine

SHORT = (
    "output_root=out",
    "data.max_samples=16",
    "eval.max_samples=6",
    "++stage.vision.train.max_steps=2",
    "++stage.llm.train.max_steps=2",
)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("preference-experiment")
    done = engine(
        "compare", "recipes=[r3-two-stage,r5-sft-dpo]",
        *SHORT, "++stage.dpo.train.max_steps=4", "stage.dpo.data.max_samples=16", cwd=cwd,
    )  # fmt: skip
    return cwd, done


def test_r5_reuses_r3s_stages_and_trains_only_dpo(experiment):
    cwd, done = experiment
    assert done.returncode == 0, done.stderr[-3000:]
    [r5] = (cwd / "out" / "runs" / "r5-sft-dpo").iterdir()
    summary = json.loads((r5 / "summary.json").read_text())
    statuses = {row["stage"]: row["status"] for row in summary["stages"]}
    assert statuses == {"vision": "cached", "llm": "cached", "dpo": "trained"}


def test_both_final_stages_are_judged_on_r5s_pairs_against_the_base(experiment):
    cwd, done = experiment
    lines = done.stdout.splitlines()
    header = next(
        i for i, line in enumerate(lines) if line.startswith("model ") and "pairs" in line
    )
    rows = {line.split("  ")[0].strip(): line for line in lines[header + 1 : header + 4]}
    assert set(rows) == {"base", "r3-two-stage (llm)", "r5-sft-dpo (dpo)"}
    assert " 6 " in rows["r5-sft-dpo (dpo)"]  # the 6 held-out pairs (eval.max_samples)
    answer = next(line for line in lines if line.startswith("answer on preference pairs: "))
    assert "beyond the noise" in answer or "within the noise" in answer
    assert "r5-sft-dpo vs r3-two-stage" in answer or "r3-two-stage vs r5-sft-dpo" in answer
    assert lines[-1].startswith("answer: ")  # the exact-match answer stays the last line
    [report] = (cwd / "out" / "experiments" / "r3-two-stage-vs-r5-sft-dpo").iterdir()
    text = (report / "experiment.md").read_text()
    assert "## Preference pairs" in text and answer in text
