"""`compare` on a finished run (`evaluate.comparison.compare_run`: measured and written by the
run side, rendered by the report): base vs every stage on the held-out probes; files, metrics,
plots and errors.

One short r3 run (2 steps per stage) is shared by the module; each compare looks at a copy of
its run folder so tests don't overwrite each other's files.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from recipe_engine.cli.main import main
from recipe_engine.config.compare import EvalOverrides
from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.comparison import compare_run
from recipe_engine.report.compare import CompareOutputs
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe
from recipe_engine.store.records import Manifest, RunSummary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RECIPE = "r3-two-stage"


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 8 and path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    overrides = [
        f"recipe={RECIPE}",
        f"output_root={root}",
        "++stage.vision.train.max_steps=2",
        "++stage.llm.train.max_steps=2",
        "stage.vision.train.logging_steps=1",
        "stage.llm.train.logging_steps=1",
        "data.max_samples=16",
        "eval.max_samples=4",
    ]
    run_recipe(plan_from_config(compose_config(overrides)), root / "runs" / RECIPE / "t1")
    return root


@pytest.fixture(scope="module")
def compared(outputs) -> CompareOutputs:
    return compare_run(outputs / "runs" / RECIPE / "t1", settings=EvalOverrides.of(max_samples=4))


def copy_run(outputs: Path, name: str) -> Path:
    target = outputs / "runs" / RECIPE / name
    target.mkdir(parents=True)
    shutil.copy(outputs / "runs" / RECIPE / "t1" / "summary.json", target / "summary.json")
    return target


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_writes_table_report_and_plots(compared):
    run_dir = compared.run_dir
    assert compared.models == ["base", "vision", "llm"] and len(compared.measured.probes) == 4
    for name in ("compare.csv", "compare.jsonl", "compare.md", "compare_metrics.json"):
        assert (run_dir / name).is_file(), name
    for png in (compared.loss_plot, *compared.plots.values()):
        assert is_png(png), png
    assert set(compared.plots) == {"exact_match", "contains", "eval_loss"}
    rows = read_csv(run_dir / "compare.csv")
    assert len(rows) == 4 and all(Path(r["image"]).is_file() for r in rows)
    assert list(rows[0])[-3:] == ["output_base", "output_vision", "output_llm"]
    lines = [json.loads(x) for x in (run_dir / "compare.jsonl").read_text().splitlines()]
    assert [line["outputs"][m] for line in lines for m in ("base", "llm")] == [
        r[f"output_{m}"] for r in rows for m in ("base", "llm")
    ]
    report = (run_dir / "compare.md").read_text()
    assert "## Side by side" in report and "](loss.png)" in report
    assert "](compare_exact_match.png)" in report


def test_each_accuracy_says_which_base_precision_it_was_measured_on(compared, outputs):
    """compare measures every model on the full-precision base; the run's own accuracy of
    the QLoRA stage was measured on its 4-bit base, and the table says so."""
    run_dir = outputs / "runs" / RECIPE / "t1"
    llm = Manifest.load(RunSummary.load(run_dir).stages[1].output_path(run_dir))
    assert llm.bits == "4bit" and llm.metrics.eval_accuracy is not None
    header = compared.table.splitlines()[0]
    assert "base precision" in header and "run's own acc" in header
    assert {m.labels.base_precision for m in compared.metrics.values()} == {"full"}
    own = compared.metrics["llm"].labels.run_accuracy
    assert own == f"{llm.metrics.eval_accuracy:.0%} (4-bit base)" and own in compared.table
    assert not compared.metrics["vision"].labels.run_accuracy.endswith("base)")  # full stage
    # The run's own held-out loss sits beside compare's, labelled the same way.
    assert "run's own loss" in header
    own_loss = compared.metrics["llm"].labels.run_loss
    assert own_loss == f"{llm.metrics.eval_loss:.4f} (4-bit base)" and own_loss in compared.table


def test_metrics_match_a_recomputation_from_the_csv(compared):
    rows = read_csv(compared.run_dir / "compare.csv")
    saved = json.loads((compared.run_dir / "compare_metrics.json").read_text())
    report = (compared.run_dir / "compare.md").read_text()
    for model in compared.models:
        answers, refs = [r[f"output_{model}"] for r in rows], [r["reference"] for r in rows]
        exact = sum(a == r for a, r in zip(answers, refs, strict=True)) / len(rows)
        contains = sum(r.lower() in a.lower() for a, r in zip(answers, refs, strict=True)) / len(
            rows
        )
        for metrics in (compared.metrics[model].to_json(), saved[model]):
            assert metrics["exact_match"] == pytest.approx(exact)
            assert metrics["contains"] == pytest.approx(contains)
        assert f"{exact:.4f}" in report and f"{saved[model]['eval_loss']:.4f}" in report


def test_eval_loss_matches_the_stage_evaluation(compared, outputs):
    # Same first 4 held-out rows as the stage's own evaluation; `vision` is full precision.
    run_dir = outputs / "runs" / RECIPE / "t1"
    vision = RunSummary.load(run_dir).stages[0].output_path(run_dir)
    recorded = Manifest.load(vision).metrics.eval_loss
    assert compared.metrics["vision"].eval_loss == pytest.approx(recorded, rel=1e-3)


def test_cli_newest_run_with_a_probe_file(outputs, compared, capsys):
    run_dir = copy_run(outputs, "t2")  # newer than t1: the verb must pick it
    own_report = {n: f"the run's own {n}\n" for n in ("compare.md", "compare.csv", "compare.jsonl")}
    for name, text in own_report.items():
        (run_dir / name).write_text(text)
    image = Path(read_csv(compared.run_dir / "compare.csv")[0]["image"])
    shutil.copy(image, outputs / "probe.png")
    probes = outputs / "probes.jsonl"
    row = {
        "images": ["probe.png"],
        "messages": [
            {"role": "user", "content": "What is in the picture?"},
            {"role": "assistant", "content": "green circle"},
        ],
    }
    probes.write_text(json.dumps(row) + "\n")
    code = main(
        [
            "compare",
            f"recipe={RECIPE}",
            f"output_root={outputs}",
            f"probes={probes}",
            "eval.max_new_tokens=3",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "exact_match" in printed and str(run_dir / "compare-probes.md") in printed
    assert str(run_dir / "loss.png") in printed
    rows = read_csv(run_dir / "compare-probes.csv")
    assert len(rows) == 1 and rows[0]["reference"] == "green circle"
    assert rows[0]["image"] == str((outputs / "probe.png").resolve())
    assert "max_new_tokens=3" in (run_dir / "compare-probes.md").read_text()
    for name in ("compare-probes.jsonl", "compare-probes_metrics.json"):
        assert (run_dir / name).is_file(), name
    # Its own report beside the run's, never over it.
    assert {n: (run_dir / n).read_text() for n in own_report} == own_report


def test_prompt_file_without_references(outputs):
    run_dir = copy_run(outputs, "t3")
    prompts = outputs / "prompts.txt"
    prompts.write_text("Say hello.\n\nName a colour.\n")
    result = compare_run(run_dir, probes=prompts, settings=EvalOverrides.of(max_new_tokens=2))
    assert len(result.measured.probes) == 2 and result.plots == {}
    assert result.metrics["llm"].n == 2
    assert result.metrics["llm"].task is None  # no references: no task metrics
    assert "exact_match" not in result.metrics["llm"].to_json()
    assert result.report == run_dir / "compare-prompts.md"
    assert [r["reference"] for r in read_csv(run_dir / "compare-prompts.csv")] == ["", ""]
    assert not (run_dir / "compare.csv").exists()


def test_missing_run_is_a_user_error(outputs, tmp_path, capsys):
    assert main(["compare", f"run={tmp_path / 'nope'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compare", f"recipe={RECIPE}", f"output_root={tmp_path}"]) == 2
    assert "No finished run" in capsys.readouterr().err
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(RecipeError, match="corrupt"):
        compare_run(tmp_path)


def test_missing_stage_folder(outputs, tmp_path):
    run_dir = outputs / "runs" / RECIPE / "t1"
    summary = json.loads((run_dir / "summary.json").read_text())
    for row, stage in zip(summary["stages"], RunSummary.load(run_dir).stages, strict=True):
        row["output"] = str(stage.output_path(run_dir))  # absolute, as older engines wrote
    summary["stages"][1]["output"] = str(tmp_path / "gone")
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RecipeError, match=r"Stage `llm`: its output folder .* is missing"):
        compare_run(tmp_path)


def test_damaged_stage_folder(outputs, tmp_path):
    run_dir = outputs / "runs" / RECIPE / "t1"
    summary = json.loads((run_dir / "summary.json").read_text())
    broken = tmp_path / "store" / "vision"
    shutil.copytree(RunSummary.load(run_dir).stages[0].output_path(run_dir), broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)  # truncated weights
    summary["stages"] = summary["stages"][:1]
    summary["stages"][0]["output"] = str(broken)
    run_dir = tmp_path / "run"
    run_dir.mkdir()  # a summary naming its stage by absolute path
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RecipeError, match=r"Could not load `vision`.*damaged"):
        compare_run(run_dir, settings=EvalOverrides.of(max_samples=1, max_new_tokens=1))
    (broken / "manifest.json").unlink()
    with pytest.raises(RecipeError, match="not a completed stage output"):
        compare_run(run_dir)


def test_harness_tasks_score_a_vlm_run_through_its_language_model(outputs, capsys):
    """lm-evaluation-harness's `hf` model is text-only: the base and both r3 stages (a full
    vision stage, then LoRA on the language model) answer the shipped text tasks without an
    image, and their rows say so."""
    run = copy_run(outputs, "harness")
    code = main(["compare", f"run={run}", "tasks=[recipe_arith_mc]", "harness.limit=4"])
    assert code == 0
    printed = capsys.readouterr().out
    with (run / "compare_harness.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model"] for r in rows] == ["base", "vision", "llm"]
    assert all(0.0 <= float(r["value"]) <= 1.0 and r["n"] == "4" for r in rows)
    assert "text only" in printed
