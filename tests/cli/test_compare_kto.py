"""`compare recipes=[text-lora,r6-sft-kto-text]`: r6 reuses text-lora's stage from the store,
and both final stages are judged on r6's held-out unpaired feedback (log-ratios against the
shared base) beside exact match on the shared probes; the experiment says which has the higher
label accuracy, and whether beyond the noise."""

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
    "++stage.llm.train.max_steps=2",
    "++stage.kto.train.max_steps=4",
    "stage.kto.data.max_samples=16",
)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("kto-experiment")
    done = engine("compare", "recipes=[text-lora,r6-sft-kto-text]", *SHORT, cwd=cwd)
    return cwd, done


def test_r6_reuses_text_loras_stage_and_trains_only_kto(experiment):
    cwd, done = experiment
    assert done.returncode == 0, done.stderr[-3000:]
    [r6] = (cwd / "out" / "runs" / "r6-sft-kto-text").iterdir()
    summary = json.loads((r6 / "summary.json").read_text())
    statuses = {row["stage"]: row["status"] for row in summary["stages"]}
    assert statuses == {"llm": "cached", "kto": "trained"}
    kto = next(row for row in summary["stages"] if row["stage"] == "kto")
    assert "reward margin" in kto["eval"]  # TRL's held-out rewards, against its reference


def test_both_final_stages_are_judged_on_r6s_unpaired_rows_against_the_base(experiment):
    cwd, done = experiment
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model ") and "rows" in line)
    assert "label acc (vs base)" in lines[header]
    rows = {line.split("  ")[0].strip(): line for line in lines[header + 1 : header + 4]}
    assert set(rows) == {"base", "text-lora (llm)", "r6-sft-kto-text (kto)"}
    assert " 6 " in rows["r6-sft-kto-text (kto)"]  # the 6 held-out rows (eval.max_samples)
    answer = next(line for line in lines if line.startswith("answer on unpaired feedback: "))
    assert "held-out label accuracy against the base over 6 rows" in answer
    assert "beyond the noise" in answer or "within the noise" in answer
    assert lines[-1].startswith("answer: ")  # the exact-match answer stays the last line
    [report] = (cwd / "out" / "experiments" / "text-lora-vs-r6-sft-kto-text").iterdir()
    text = (report / "experiment.md").read_text()
    assert "## Unpaired feedback" in text and answer in text
