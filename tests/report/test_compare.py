"""`report.compare`: a comparison's report rendered from its records (measured by hand here:
no model is loaded); the platform warning."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from measured import RECIPE, measured
from platforms import EPYC, XEON

from recipe_engine.evaluate.scoring import write_scores
from recipe_engine.report.compare import platform_warning_lines, render_compare
from recipe_engine.store.records import Manifest


def test_the_report_renders_the_records(tmp_path):
    scored = write_scores(measured(tmp_path / "run"))
    compared = render_compare(scored)
    assert compared.report == tmp_path / "run" / "compare.md"
    assert compared.models == ["base", "vision", "llm"] and len(compared.measured.probes) == 2
    assert compared.scored.paths() == scored.paths()
    assert compared.loss_plot is None  # no stage folder holds metrics.jsonl
    header = compared.table.splitlines()[0]
    assert "base precision" in header and "run's own acc" in header
    assert "50% (4-bit base)" in compared.table
    report = compared.report.read_text()
    assert report.startswith(f"# Compare: recipe `{RECIPE}`")
    assert "Settings: probes=held-out split of data `shapes`, seed=0, max_new_tokens=8" in report
    assert compared.table in report and "## Side by side" in report
    assert "And this \\| one?" in report  # a pipe in a probe does not break the table
    assert "## Loss over the run" not in report


def test_stages_trained_on_different_platforms_get_a_warning(tmp_path):
    def stage(name: str, platform) -> tuple[str, Path, Manifest]:
        fields = dict(recipe=RECIPE, fingerprint=name, format="full", dtype="float32")
        return name, tmp_path / name, Manifest(name, **fields, model_entry={}, platform=platform)

    lines = platform_warning_lines([stage("vision", XEON), stage("llm", EPYC)], bullet="- ")
    assert lines == [
        "warning: the stages compared came from 2 platforms, which differ in cpu model "
        "Intel(R) Xeon(R) Platinum 8480+ vs AMD EPYC, cpu capability AVX512 vs AVX2, threads 4 "
        "vs 2: floating-point results may differ",
        f"- vision: {XEON.describe()}",
        f"- llm: {EPYC.describe()}",
    ]
    same = [stage("vision", XEON), stage("llm", replace(XEON)), stage("old", None)]
    assert platform_warning_lines(same) == []
