"""`compare recipes=[A,B]` end to end: both recipes trained as `run` trains them, one report,
the answer last; a second invocation reuses every stage and every stored evaluation."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from engine_cli import SHORT_STAGES, engine

from recipe_engine.cli.main import main
from recipe_engine.resolve.tiny import build_dataset

RECIPES = ("r1-llm-only", "r3-two-stage")
SHORT = SHORT_STAGES


def compare_recipes(cwd: Path, *more: str) -> subprocess.CompletedProcess:
    return engine("compare", f"recipes=[{','.join(RECIPES)}]", *SHORT, *more, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """Both recipes trained once, in a folder the tests of this module share."""
    cwd = tmp_path_factory.mktemp("experiment")
    return cwd, compare_recipes(cwd)


def statuses(run_dir: Path) -> list[str]:
    summary = json.loads((run_dir / "summary.json").read_text())
    return [stage["status"] for stage in summary["stages"]]


def newest(folder: Path) -> Path:
    return max(folder.iterdir())


def test_two_recipes_are_trained_compared_and_reused(first):
    tmp_path, first = first
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "out"
    assert statuses(newest(out / "runs" / "r1-llm-only")) == ["trained"]
    assert statuses(newest(out / "runs" / "r3-two-stage")) == ["trained", "trained"]
    lines = first.stdout.splitlines()
    assert lines[-1].startswith("answer: ") and "held-out exact match" in lines[-1]
    assert "training noise unmeasured" in lines[-1]  # one seed: the verdict says so
    assert any(line.startswith("Differences in held-out exact match (") for line in lines)
    for name in ("base", *RECIPES):
        assert any(line.startswith(f"{name} ") for line in lines), name
    assert "(4-bit base)" in first.stdout  # both final stages are QLoRA stages
    assert "compare report" not in first.stdout  # no per-run base-vs-stages report

    report = newest(out / "experiments" / "r1-llm-only-vs-r3-two-stage")
    text = (report / "experiment.md").read_text()
    assert "## Settings that differ" in text and "stage vision: only in B" in text
    assert lines[-1] in text
    with (report / "experiment.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["recipe"], r["model"]) for r in rows] == [
        (*RECIPES[:1], "llm"),
        (RECIPES[1], "llm"),
        ("base", "base"),
    ]
    assert {r["source"] for r in rows} == {"stored"}  # the stages' own evaluations, reused

    again = compare_recipes(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert statuses(newest(out / "runs" / "r1-llm-only")) == ["cached"]
    assert statuses(newest(out / "runs" / "r3-two-stage")) == ["cached", "cached"]
    assert "experiment: evaluating" not in again.stdout  # nothing measured again
    assert again.stdout.splitlines()[-1] == lines[-1]


def shapes_probes(folder: Path) -> Path:
    """Three pictures of the shapes data asked as prompt/completion rows (the recipes trained
    on conversations): a probe file in another format than the data."""
    shapes = build_dataset("shapes")
    rows = [json.loads(line) for line in (shapes / "eval.jsonl").read_text().splitlines()[:3]]
    path = folder / "probes.jsonl"
    with path.open("w") as handle:
        for row in rows:
            answer = row["messages"][-1]["content"][0]["text"]
            probe = {
                "images": [str(shapes / row["images"][0])],
                "prompt": "What is in the picture?",
                "completion": answer,
            }
            handle.write(json.dumps(probe) + "\n")
    return path


def test_a_probe_file_scores_every_recipe_and_the_base_on_its_rows(first, tmp_path):
    cwd, trained = first
    assert trained.returncode == 0, trained.stderr[-3000:]
    probed = compare_recipes(cwd, f"probes={shapes_probes(tmp_path)}")
    assert probed.returncode == 0, probed.stderr[-3000:]
    lines = probed.stdout.splitlines()
    for name in ("base", *RECIPES):
        assert any(line.startswith(f"{name} ") for line in lines), name
    assert lines[-1].startswith("answer: ")
    report = newest(cwd / "out" / "experiments" / "r1-llm-only-vs-r3-two-stage")
    assert "Probes: the rows of " in (report / "experiment.md").read_text()
    with (report / "experiment.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    # Every model measured now, on the file's 3 rows; the base once.
    assert [(r["model"], r["source"], r["samples"]) for r in rows] == [
        ("llm", "evaluated", "3"),
        ("llm", "evaluated", "3"),
        ("base", "evaluated", "3"),
    ]
    # Reused stages keep the wall time of the run that trained them, and say so.
    assert all("(cached)" in line for line in lines if line.startswith(RECIPES))


def test_probe_files_that_cannot_score_a_recipe_are_refused_first(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is in the picture?\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        '{"prompt": "Name it.", "completion": "red circle"}\n{"prompt": "Name it."}\n'
    )
    for probes, named in (
        (tmp_path / "nowhere.jsonl", "no such file"),
        (prompts, "without references"),
        (broken, "broken.jsonl, row 2"),
    ):
        argv = ["compare", f"recipes=[{','.join(RECIPES)}]", f"probes={probes}"]
        code = main([*argv, f"output_root={tmp_path / 'out'}"])
        error = capsys.readouterr().err
        assert code == 2 and named in error and error.count("error:") == 1, error
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "arguments, named",
    [
        (["recipes=[r1-llm-only,r3-two-stag]"], "Did you mean `r3-two-stage`?"),
        (["recipes=[r1-llm-only]"], "needs two or more"),
        (["recipes=[r1-llm-only,text-lora]"], "use a different model"),
        (["recipes=[r1-llm-only,r3-two-stage]", "seeds=[x]"], "seeds=[0,1,2]"),
    ],
)
def test_bad_input_is_one_message_exit_2_and_writes_nothing(tmp_path, capsys, arguments, named):
    code = main(["compare", *arguments, f"output_root={tmp_path / 'out'}"])
    error = capsys.readouterr().err
    assert code == 2 and named in error and error.count("error:") == 1
    assert not (tmp_path / "out").exists()
