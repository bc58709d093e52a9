"""`compare recipe=NAME tasks=[...]`: lm-evaluation-harness scores of the base and every stage
printed under the probes' metrics and written into compare.md and compare_harness.csv, each row
labelled with the harness version and the task's config hash; what it refuses (exit 2, one
`error:` line, nothing written).

One short text-lora run (2 steps) is shared by the module; the harness scores 4 documents per
task.
"""

from __future__ import annotations

import csv
import re
import sys
from importlib.metadata import version
from pathlib import Path

import lm_eval  # noqa: F401  (the eval extra, in dev: missing fails, never skips)
import pytest
from plans import short_text_run

from recipe_engine.cli.main import main

TASKS = "tasks=[recipe_arith,recipe_arith_mc]"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("compare-harness")
    short_text_run(root)
    return root


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def errors(captured: str) -> list[str]:
    return [line for line in captured.splitlines() if line.startswith("error: ")]


def test_prints_and_writes_harness_scores_beside_the_probes(outputs, capsys, monkeypatch):
    from recipe_engine.evaluate import probing

    loaded: list[str] = []  # every model load of the comparison, by location
    real = probing._pretrained

    def counted(location, manifest):
        loaded.append(location)
        return real(location, manifest)

    monkeypatch.setattr(probing, "_pretrained", counted)
    code = main(
        [
            "compare",
            "recipe=text-lora",
            f"output_root={outputs}",
            TASKS,
            "harness.limit=4",
            "eval.max_samples=2",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    run_dir = outputs / "runs" / "text-lora" / "t1"
    with (run_dir / "compare_harness.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["model"], r["task"]) for r in rows] == [
        ("base", "recipe_arith"),
        ("base", "recipe_arith_mc"),
        ("llm", "recipe_arith"),
        ("llm", "recipe_arith_mc"),
    ]
    assert all(0.0 <= float(r["value"]) <= 1.0 and r["n"] == "4" for r in rows)
    label = f"lm_eval {version('lm_eval')}"
    table = printed[printed.index("task hash") :].splitlines()
    for row in rows:  # each printed row: the model, task, version and the hash's first 12 hex
        short = row["task_hash"][:12]
        assert re.fullmatch(r"[0-9a-f]{12}", short)
        assert any(
            line.split()[:2] == [row["model"], row["task"]] and label in line and short in line
            for line in table
        ), (row, table)
    assert "exact_match" in printed.splitlines()[0]  # the probes' table comes first
    assert f"harness:   {run_dir / 'compare_harness.csv'}" in printed
    report = (run_dir / "compare.md").read_text()
    assert "## lm-evaluation-harness" in report and label in report
    assert rows[0]["task_hash"][:12] in report
    # The probes and the harness ask each model in one pass: base and llm, one load each.
    assert len(loaded) == 2, loaded


def test_unknown_task_is_refused_before_any_model_loads(outputs, capsys):
    before = snapshot(outputs)
    code = main(["compare", "recipe=text-lora", f"output_root={outputs}", "tasks=[recipe_arth]"])
    assert code == 2
    [message] = errors(capsys.readouterr().err)
    assert "Unknown harness task `recipe_arth`" in message
    assert "Did you mean `recipe_arith`?" in message
    assert "recipe_arith, recipe_arith_mc" in message
    assert snapshot(outputs) == before  # nothing written


def test_without_the_harness_installed_it_says_which_extra(outputs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` raises ImportError
    before = snapshot(outputs)
    assert main(["compare", "recipe=text-lora", f"output_root={outputs}", TASKS]) == 2
    [message] = errors(capsys.readouterr().err)
    assert "pip install 'recipe-engine[eval]'" in message
    assert snapshot(outputs) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["recipes=[r1-llm-only,r3-two-stage]", TASKS], "not recipes="),
        (["recipe=text-lora", TASKS, "harness.limit=0"], "harness.limit=0 must be"),
        (["recipe=text-lora", "harness.limit=4"], "need tasks="),
    ],
)
def test_bad_harness_arguments_are_refused(outputs, capsys, args, expected):
    assert main(["compare", f"output_root={outputs}", *args]) == 2
    [message] = errors(capsys.readouterr().err)
    assert expected in message
