"""Recipes side by side: seeds aggregated, the answer line, the table, reused evaluations."""

from __future__ import annotations

import csv
from dataclasses import asdict, replace
from pathlib import Path

from platforms import EPYC, XEON

from recipe_engine.config.schema import EvalConfig
from recipe_engine.report.experiment import (
    RecipeRun,
    Score,
    Spread,
    answer_line,
    base_summary,
    differences_sentence,
    experiment_table,
    stored_base_score,
    stored_score,
    summarize,
)
from recipe_engine.report.experiment_report import (
    CSV_FIELDS,
    Experiment,
    platform_warning_lines,
    write_experiment,
)
from recipe_engine.store.records import Manifest, StageMetrics
from recipe_engine.store.stage_records import QuantizationFacts

EVAL = EvalConfig(max_new_tokens=8)  # what an experiment measured with
SETTINGS = asdict(EVAL)  # as a manifest records them


def run(recipe: str, exact: float, seed: int = 0, *, precision: str = "4-bit") -> RecipeRun:
    return RecipeRun(
        recipe=recipe,
        seed=seed,
        run_dir=Path(f"/out/runs/{recipe}/t-{seed}"),
        final_stage="llm",
        score=Score(exact, exact, 0.5, 48, precision=precision),
        base=Score(0.0, 0.0, None, 48, precision="full"),
        trained="llm: lm_head, language_model",
        steps=240,
        wall_s=8.0,
        peak_gib=0.05,
    )


def manifest(*, bits: str = "4bit", settings: dict | None = None, **metrics) -> Manifest:
    return Manifest(
        stage="llm",
        recipe="r1-llm-only",
        fingerprint="f" * 64,
        format="peft_adapter",
        model_entry={"kind": "vlm"},
        dtype="float32",
        quantization=QuantizationFacts(bits=bits),
        metrics=StageMetrics(**metrics),
        eval_settings=SETTINGS if settings is None else settings,
    )


# --------------------------------------------------------------------------- the answer


def seeds(recipe: str, *values: float) -> list[RecipeRun]:
    return [run(recipe, value, seed) for seed, value in enumerate(values)]


def test_one_seed_never_says_beats_without_saying_training_noise_is_unmeasured():
    summaries = summarize([run("r1-llm-only", 0.54), run("r3-two-stage", 0.92)])
    assert answer_line(summaries) == (
        "answer: r3-two-stage beats r1-llm-only on held-out exact match (1 seed: beyond probe "
        "noise only, training noise unmeasured; seeds=[0,1,2] measures it)"
    )


def test_one_seed_with_a_gap_inside_the_probes_sampling_noise_is_level():
    # 48 probes at 94% and 90%: the 95% interval of the difference is about +-11 points.
    answer = answer_line(summarize([run("r2", 0.90), run("r3", 0.94)]))
    assert answer.startswith("answer: r2 and r3 are level on held-out exact match (1 seed")


def test_leaders_are_named_in_the_order_given_so_the_verdict_does_not_follow_small_swaps():
    runs = [run("r1", 0.25), run("r2", 0.86), run("r3", 0.88), run("r4", 0.94)]
    answer = answer_line(summarize(runs))
    assert answer.startswith(
        "answer: r2, r3 and r4 are level on held-out exact match, and beat r1 (1 seed"
    )
    assert "%" not in answer  # measured values live in the table and the differences line


def test_equal_accuracy_is_no_difference():
    summaries = summarize([run("r1-llm-only", 0.5), run("r3-two-stage", 0.5)])
    answer = answer_line(summaries)
    assert answer.startswith("answer: no difference between r1-llm-only and r3-two-stage")


def test_seeds_that_disagree_make_a_gap_level_that_probe_noise_alone_would_call_a_win():
    # 40 vs 60 points on 200 probes is beyond probe noise, but the seeds scatter by 30 points.
    one = summarize([run("a", 0.4), run("b", 0.6)])
    for summary in one:
        summary.runs[0].score = replace(summary.runs[0].score, samples=200)
    assert answer_line(one).startswith("answer: b beats a")
    runs = seeds("a", 0.1, 0.4, 0.7) + seeds("b", 0.3, 0.6, 0.9)
    answer = answer_line(summarize(runs))
    assert answer.startswith("answer: a and b are level on held-out exact match (3 seeds")
    sentence = differences_sentence(summarize(runs))
    assert "b vs a: +20 points [" in sentence and "(within the noise)." in sentence
    assert "Welch" in sentence


def test_seeds_that_agree_make_a_clear_win():
    runs = seeds("a", 0.1, 0.2, 0.3) + seeds("b", 0.8, 0.9, 0.7)
    assert answer_line(summarize(runs)) == (
        "answer: b beats a on held-out exact match (3 seeds: 95% intervals of the differences, "
        "seed and probe noise)"
    )


def test_several_recipes_name_different_base_precisions():
    runs = [run("r1", 0.5), run("r2", 0.1, precision="full"), run("r3", 0.9)]
    answer = answer_line(summarize(runs))
    assert answer.startswith("answer: r3 beats r1 and r2 on held-out exact match")
    assert "measured on 4-bit vs full vs 4-bit base" in answer


def test_a_recipe_without_an_evaluation_gets_no_verdict():
    missing = run("b", 0.9)
    missing.score = None
    assert answer_line(summarize([run("a", 0.5), missing])).startswith(
        "answer: cannot tell: no held-out exact match for b"
    )


# --------------------------------------------------------------------------- aggregation


def test_spread_is_mean_and_min_max_and_needs_every_seed():
    assert Spread.of([0.5, 0.7, 0.6]) == Spread(0.6, 0.5, 0.7, 3)
    assert Spread.of([0.5, None]) is None  # a seed without the metric: no fair mean


def test_the_base_is_listed_once_per_seed():
    runs = [run("a", 0.5, 0), run("b", 0.9, 0), run("a", 0.5, 1), run("b", 0.9, 1)]
    base = base_summary(runs)
    assert base is not None and base.seeds == [0, 1] and base.metrics["exact_match"].n == 2


def test_table_has_the_base_then_one_row_per_recipe_with_precision_and_spread():
    runs = [run("a", v, seed) for seed, v in enumerate((0.5, 0.7))] + [
        run("b", 0.9),
        run("b", 0.9, 1),
    ]
    lines = experiment_table(summarize(runs), base_summary(runs)).splitlines()
    assert lines[0].split()[:3] == ["recipe", "final", "stage"]
    assert lines[1].startswith("base ")
    assert "60% [50..70%] (4-bit base)" in lines[2] and lines[2].startswith("a ")
    assert "90% (4-bit base)" in lines[3]  # equal over seeds: no range
    assert "llm: lm_head, language_model" in lines[3] and "240" in lines[3]


# --------------------------------------------------------------------------- stored scores


def test_a_stored_evaluation_is_reused_when_made_with_the_same_settings():
    stored = manifest(eval_accuracy=0.9, eval_contains=0.95, eval_loss=0.1, eval_samples=48)
    # The switches (enabled, compare) decide whether to evaluate, not what is measured.
    score = stored_score(stored, replace(EVAL, compare=False))
    assert score == Score(0.9, 0.95, 0.1, 48, precision="4-bit", source="stored")


def test_a_stored_evaluation_with_other_settings_or_none_is_measured_again():
    stored = manifest(eval_accuracy=0.9, eval_contains=0.95)
    assert stored_score(stored, replace(EVAL, max_samples=10)) is None
    unrecorded = manifest(eval_accuracy=0.9, eval_contains=0.95)
    unrecorded.eval_settings = None  # trained before the settings were recorded
    assert stored_score(unrecorded, EVAL) is None
    old = manifest(eval_accuracy=0.9)  # written before `contains` was recorded
    assert stored_score(old, EVAL) is None
    failed = manifest(eval_accuracy=0.9, eval_contains=0.9, evaluation_error="OOM")
    assert stored_score(failed, EVAL) is None
    before_top_p = {k: v for k, v in SETTINGS.items() if k != "top_p"}  # an older engine's
    assert (
        stored_score(manifest(eval_accuracy=0.9, eval_contains=0.9, settings=before_top_p), EVAL)
        is None
    )


def test_the_experiments_eval_config_matches_the_settings_a_manifest_recorded():
    stored = manifest(eval_accuracy=0.9, eval_contains=0.95, settings=asdict(EVAL))
    assert stored_score(stored, EVAL) == Score(0.9, 0.95, None, None, precision="4-bit")
    assert stored_score(stored, replace(EVAL, max_samples=10)) is None


def test_the_base_score_comes_from_the_root_stage_at_full_precision():
    root = manifest(base_accuracy=0.1, base_contains=0.2, eval_samples=48)
    assert stored_base_score(root, EVAL) == Score(0.1, 0.2, None, 48, precision="full")


# --------------------------------------------------------------------------- the report


def test_report_files_hold_the_table_the_differences_and_the_answer(tmp_path):
    runs = [run("r1-llm-only", 0.54), run("r3-two-stage", 0.92)]
    experiment = Experiment(runs, EVAL, "stage vision: only in B (r3-two-stage)")
    written = write_experiment(tmp_path / "exp", experiment)
    report = written.report.read_text()
    assert "# Experiment: r1-llm-only vs r3-two-stage" in report
    assert "| r3-two-stage " in report and "92% (4-bit base)" in report
    assert "stage vision: only in B (r3-two-stage)" in report
    assert f"**{written.answer}**" in report
    with written.csv.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["recipe"], r["model"]) for r in rows] == [
        ("r1-llm-only", "llm"),
        ("r3-two-stage", "llm"),
        ("base", "base"),
    ]
    assert rows[1]["exact_match"] == "0.92" and rows[1]["base_precision"] == "4-bit"
    for metric, path in written.plots.items():  # None: matplotlib is not installed
        assert path is None or path.name == f"experiment_{metric}.png"


def test_the_csv_leaves_what_a_row_lacks_empty_and_the_printout_ends_with_the_answer(tmp_path):
    runs = [run("r1-llm-only", 0.54), replace(run("r3-two-stage", 0.92), score=None)]
    written = write_experiment(tmp_path / "exp", Experiment(runs, EVAL, "-"))
    lines = written.csv.read_text().splitlines()
    assert lines[0] == ",".join(CSV_FIELDS)
    assert lines[1].startswith("r1-llm-only,0,llm,0.54,0.54,0.5,48,4-bit,stored,")
    assert ',"llm: lm_head, language_model",240,8.0,0.05,' in lines[1]
    assert lines[2].startswith("r3-two-stage,0,llm,,,,,,,")  # not scored: no metric cells
    assert lines[3] == "base,0,base,0.0,0.0,,48,full,stored,,,,,"  # the base: no costs
    printed = written.printed()
    assert printed[0] == "experiment: r1-llm-only vs r3-two-stage (seed 0)"
    assert printed[1] == written.table and printed[-1] == written.answer
    assert f"report: {written.report}" in printed and f"table:  {written.csv}" in printed


def test_recipes_trained_on_different_platforms_get_a_warning_in_the_report(tmp_path):
    runs = [
        replace(run("r1-llm-only", 0.54), platforms=[XEON]),
        replace(run("r3-two-stage", 0.92), platforms=[XEON, EPYC, None]),  # None: recorded before
    ]
    lines = platform_warning_lines(runs)
    warning = lines[0]
    assert warning.startswith("warning: the recipes compared came from 2 platforms, which differ")
    assert warning.endswith("AVX512 vs AVX2, threads 4 vs 2: floating-point results may differ")
    assert lines[1:] == [
        f"  r1-llm-only, r3-two-stage: {XEON.describe()}",
        f"  r3-two-stage: {EPYC.describe()}",
    ]
    written = write_experiment(tmp_path / "exp", Experiment(runs, EVAL, "-"))
    assert written.platform_warning == lines
    report = written.report.read_text()
    assert f"{lines[0]}\n- r1-llm-only, r3-two-stage: {XEON.describe()}" in report


def test_recipes_trained_on_one_platform_get_no_warning(tmp_path):
    runs = [replace(run(name, 0.5), platforms=[XEON]) for name in ("r1-llm-only", "r2")]
    written = write_experiment(tmp_path / "exp", Experiment(runs, EVAL, "-"))
    assert written.platform_warning == [] and "warning" not in written.report.read_text()
