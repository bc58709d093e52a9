"""The end-of-run report of a fan-out recipe: every target stage scored, branches plotted.

Most results are fabricated on a real plan (no training): these tests pin what the report
says about a stage graph, not what the stages learn; one short run checks the real thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe_engine.config.compose import compose_config
from recipe_engine.evaluate.after_run import report_run
from recipe_engine.report.plots import loss_series
from recipe_engine.report.run_report import plot_stages, run_table, sinks
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import StageResult, run_recipe
from recipe_engine.store.records import Manifest, StageMetrics
from recipe_engine.store.stage_records import QuantizationFacts

USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")
STEPS = {"vision": 3, "llm": 4, "joint": 2}
# vision (full, root) -> llm (LoRA on a 4-bit base) and joint (LoRA, full precision)
SCORES = {"vision": 0.5, "llm": 0.96, "joint": 0.9}


def fanout_plan(*overrides: str):
    cfg = compose_config(["recipe=user-fanout", *overrides], extra_dirs=[USER_RECIPES])
    return plan_from_config(cfg)


@pytest.fixture(scope="module")
def plan():
    return fanout_plan()


def result(folder: Path, name: str, parent: str | None) -> StageResult:
    """A committed-looking stage: its metrics.jsonl with STEPS[name] steps, its manifest."""
    folder.mkdir(parents=True)
    records = [{"step": s, "loss": 3.0 - 0.1 * s} for s in range(1, STEPS[name] + 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    metrics = StageMetrics(
        steps=STEPS[name],
        eval_accuracy=SCORES[name],
        base_accuracy=0.0 if parent is None else None,
    )
    manifest = Manifest(
        stage=name,
        recipe="user-fanout",
        fingerprint=f"{name}-key",
        format="full",
        model_entry={},
        dtype="float32",
        parent=parent,
        quantization=QuantizationFacts(bits="4bit") if name == "llm" else QuantizationFacts(),
        metrics=metrics,
    )
    return StageResult(name, "trained", folder, manifest)


@pytest.fixture
def results(plan, tmp_path) -> list[StageResult]:
    return [result(tmp_path / n, n, plan.stages[n].parent) for n in plan.graph.order]


def test_the_summary_scores_every_child_of_a_fan_out(plan, results, tmp_path):
    assert [r.name for r in sinks(plan, results)] == ["llm", "joint"]
    table = run_table(plan, results, tmp_path)
    assert "held-out exact match: base 0% -> llm 96% (4-bit base), joint 90%" in table
    # The table's own accuracy says which base precision it was measured on.
    assert "acc 96% (4-bit base)" in table and "acc 90%" in table


def test_targets_name_the_stages_scored(results, tmp_path):
    plan = fanout_plan("recipe.targets=[llm,joint]")
    assert [r.name for r in sinks(plan, results)] == ["llm", "joint"]
    only_llm = [r for r in results if r.name != "joint"]  # e.g. a run with only=[llm]
    table = run_table(plan, only_llm, tmp_path)
    assert "held-out exact match: base 0% -> final stage `llm` 96% (4-bit base)" in table


def test_each_child_is_plotted_from_where_its_parent_ended(plan, results):
    series = {s.name: s for s in loss_series(plot_stages(plan, results))}
    assert (series["vision"].start, series["vision"].end) == (0, 3)
    # Both children branch at the vision stage's last step: joint does not follow llm.
    assert (series["llm"].start, series["llm"].end) == (3, 7)
    assert (series["joint"].start, series["joint"].end) == (3, 5)
    assert [x for x, _ in series["joint"].train] == [4, 5]


def test_a_trained_fan_out_reports_both_children(tmp_path, capsys):
    short = ["max_steps=2", "per_device_train_batch_size=4", "logging_steps=1"]
    plan = fanout_plan(
        f"output_root={tmp_path}",
        *(f"++stage.{stage}.train.{kv}" for stage in STEPS for kv in short),
        "data.max_samples=16",
        "eval.max_samples=4",
        "eval.compare=false",
    )
    run_dir = tmp_path / "runs" / "user-fanout"
    assert report_run(plan, run_recipe(plan, run_dir), run_dir) == []
    printed = capsys.readouterr().out
    [line] = [x for x in printed.splitlines() if x.startswith("held-out exact match")]
    # Both LoRA children train on the 4-bit base (the llm-lora and joint-lora templates).
    assert line.startswith("held-out exact match: base ")
    assert "% -> llm " in line and "% (4-bit base), joint " in line and line.endswith("base)")
    assert (run_dir / "loss.png").is_file()


def test_trained_comes_from_what_is_trainable_and_a_reused_time_says_cached(tmp_path):
    """freeze.patterns freeze the projector (`merger`) and the first vision block: `plan`, the
    run table and the manifest say what really had trainable parameters; the rerun reuses the
    stage, and its time is labelled as the one recorded when it trained."""
    from recipe_engine.plan.render import render_plan

    plan = plan_from_config(
        compose_config(
            [
                "recipe=r2-vision-only",
                f"output_root={tmp_path}",
                "stage.vision.freeze.patterns=[merger,'blocks\\.0\\.']",
                "++stage.vision.train.max_steps=2",
                "data.max_samples=8",
                "eval.enabled=false",
            ]
        )
    )
    [planned] = [x for x in render_plan(plan).splitlines() if "trained:" in x]
    share = plan.stages["vision"].policy.trained_share("vision_tower")
    assert (
        planned.split("trained:")[1].strip()
        == f"vision_tower ({share:.1%}; freeze.patterns) (full)"
    )

    first = run_recipe(plan, tmp_path / "runs" / "first")
    report = first[0].manifest.trainable_report
    assert report["projector"].trainable == 0  # frozen by a pattern, not by its component
    assert report["vision_tower"].trainable / report["vision_tower"].params == share
    [row] = run_table(plan, first, tmp_path).splitlines()[2:3]
    assert f"vision_tower ({share:.1%})" in row and "projector" not in row
    assert "(cached)" not in row

    again = run_recipe(plan, tmp_path / "runs" / "again")
    [row] = run_table(plan, again, tmp_path).splitlines()[2:3]
    seconds = round(first[0].manifest.timings["total_s"], 1)
    assert again[0].status == "cached" and row.rstrip().endswith(f"{seconds} (cached)")
