"""`compare`'s report: the base model and every stage's output on one probe set, side by side.
`evaluate.probing` measures the models and `evaluate.scoring` writes the records (CSV, JSONL,
metrics JSON); this renders them (the Markdown report, the table, the bar charts and the loss plot).

    python -m recipe_engine compare recipe=r3-two-stage [output_root=DIR] [probes=FILE]
                                    [eval.max_new_tokens=16 eval.max_samples=50 ...]
    python -m recipe_engine compare run=outputs/runs/r3-two-stage/<time>

Probes are the recipe's held-out split, or `probes=FILE`: rows in any of the data formats
(JSONL/JSON/CSV/parquet, image paths relative to the file) or a `.txt` file of one prompt per
line (no references, so no task metrics). Every model answers the same probes with the same
generation settings; the run folder gets compare.csv, compare.jsonl, compare_metrics.json,
compare.md (side-by-side table, metrics, bar charts, loss plot) and the PNGs. With
`probes=FILE` the files are named compare-<file stem>.* instead: the run's own report stays.
A model `compare` loads is measured on the full-precision base; the comparison that ends a run
reads the passes the run made itself (a QLoRA stage on its 4-bit base); the `base precision`
column says which. The table also shows the accuracy and the eval loss the run measured itself,
labelled with its base precision (4-bit for a QLoRA stage).
The eval loss is the stage's own held-out loss (run.held_out_loss: TRL's tokens and masks with
the stage's loss settings), so compare's and the run's agree wherever the base is the same.
With `tasks=[...]` the same models' lm-evaluation-harness scores (evaluate.harness) get their own
section in compare.md (report.harness renders it) and their own records, compare_harness.*.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.files import atomic_write_text
from recipe_engine.report.harness import harness_section, harness_table
from recipe_engine.report.plots import PlotStage, write_loss_plot, write_metric_bars
from recipe_engine.report.preference import judged_table, table_for
from recipe_engine.store.records import platform_lines
from recipe_engine.store.scores import (
    HarnessScored,
    Measured,
    ModelMetrics,
    Probe,
    Scored,
    Stage,
    metrics_json,
)
from recipe_engine.tables import markdown_table, text_table

log = logging.getLogger("recipe_engine")


METRICS = {  # metric -> (title, higher is better)
    "exact_match": ("Exact match (answer == reference)", True),
    "contains": ("Contains (reference in answer, case-insensitive)", True),
    "eval_loss": ("Eval loss: the stage's own held-out loss (lower is better)", False),
}
MD_ROWS = 50  # the report shows this many probes; the CSV/JSONL hold them all


# --------------------------------------------------------------------------- CLI


def newest_run(output_root: Path, recipe: str) -> Path:
    """The most recently finished run folder (one with summary.json) of a recipe."""
    folder = output_root / "runs" / recipe
    runs = [p for p in folder.glob("*/summary.json")] if folder.is_dir() else []
    if not runs:
        raise RecipeError(
            f"No finished run of recipe `{recipe}` under {folder} (no */summary.json). Run it "
            f"first (python -m recipe_engine recipe={recipe}), set output_root=<where it wrote>, "
            "or pass run=PATH.",
            key="run",
        )
    return max(runs, key=lambda p: (p.stat().st_mtime, p.parent.name)).parent


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class CompareOutputs:
    """A comparison rendered: what was measured and the records written (`scored`; with
    `tasks=`, the harness' scores and records), the printed table, the report and its figures."""

    scored: Scored
    table: str  # the metrics (and the judged rows') table, as printed
    report: Path  # <stem>.md
    plots: dict[str, Path]  # metric -> its bar chart
    loss_plot: Path | None
    platform_warning: list[str]  # stages trained on different platforms, as printed
    harness: HarnessScored | None = None

    @property
    def measured(self) -> Measured:
        return self.scored.measured

    @property
    def run_dir(self) -> Path:
        return self.scored.measured.run_dir

    @property
    def models(self) -> list[str]:
        """The models compared, the base first."""
        return list(self.scored.measured.outputs)

    @property
    def metrics(self) -> dict[str, ModelMetrics]:
        return self.scored.measured.metrics

    @property
    def harness_table(self) -> str | None:
        """The harness' scores as printed under the metrics (None: no `tasks=`)."""
        return harness_table(self.harness.result) if self.harness else None


def render_compare(scored: Scored, harness: HarnessScored | None = None) -> CompareOutputs:
    """The comparison's report beside its records (`evaluate.scoring` wrote them;
    `evaluate.harness` the harness scores, with `tasks=`): the Markdown report, a bar chart per
    metric and the loss plot."""
    measured, stem = scored.measured, scored.stem
    stages, run_dir = measured.stages, measured.run_dir
    records = metrics_json(measured.metrics)
    loss_plot = _loss_plot(run_dir, stages)
    bars = _metric_bars(run_dir, stem, records)
    table = metrics_table(records) + _judged_text(records)
    section = harness_section(harness) if harness else []
    report = _write_report(measured, stem, Figures(table, bars, loss_plot, section))
    warning = platform_warning_lines(stages)
    return CompareOutputs(scored, table, report, bars, loss_plot, warning, harness)


@dataclass(frozen=True)
class Figures:
    table: str
    bars: dict[str, Path]
    loss_plot: Path | None
    harness: list[str] = field(default_factory=list)  # compare.md's harness section


def platform_warning_lines(stages: list[Stage], *, bullet: str = "  ") -> list[str]:
    """A warning, and which stage ran where, when the stages compared were trained on
    different platforms: their outputs may differ for that reason too."""
    labelled = [(name, manifest.platform) for name, _, manifest in stages]
    return platform_lines("the stages compared", labelled, bullet=bullet)


def _metric_bars(
    run_dir: Path, stem: str, metrics: Mapping[str, Mapping[str, Any]]
) -> dict[str, Path]:
    """A bar chart per metric every model has."""
    charts = {
        metric: write_metric_bars(
            run_dir / f"{stem}_{metric}.png",
            {name: values[metric] for name, values in metrics.items()},
            title,
        )
        for metric, (title, _) in METRICS.items()
        if all(values.get(metric) is not None for values in metrics.values())
    }
    return {metric: chart for metric, chart in charts.items() if chart is not None}


# Label columns of the table: the base precision compare measured on, and the accuracy the
# run itself measured (on a quantized base for 4/8-bit stages), so neither is mistaken for
# the other.
LABELS = {
    "base_precision": "base precision",
    "run_accuracy": "run's own acc",
    "run_loss": "run's own loss",
}


def metrics_table(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """A plain-text table, one row per model (also used in the Markdown report), from each
    model's metrics as its record holds them (`ModelMetrics.to_json`: a column per key)."""
    present = [*METRICS, *LABELS]
    columns = ["n", *(m for m in present if any(m in v for v in metrics.values()))]
    rows = [[name, *(_fmt(values.get(c)) for c in columns)] for name, values in metrics.items()]
    header = ["model", *(LABELS.get(c, c) for c in columns)]
    return "\n".join(text_table(rows, header=header))


def _judged_text(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """The judged rows' table under the metrics (preference pairs, or unpaired feedback),
    where the run has a preference stage."""
    judged = {name: values.get("preference") for name, values in metrics.items()}
    table = table_for(judged)
    if table is None:
        return ""
    lines = judged_table(judged)
    return f"\n\nheld-out {table.title} ({table.rule}):\n" + "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


# --------------------------------------------------------------------------- writing


def _loss_plot(run_dir: Path, stages: list[Stage]) -> Path | None:
    metrics = [
        PlotStage(n, manifest.parent, folder / "metrics.jsonl") for n, folder, manifest in stages
    ]
    if not any(stage.metrics.is_file() for stage in metrics):
        return None
    return write_loss_plot(run_dir, metrics)


def _cell(value: Any, limit: int = 120) -> str:
    """Markdown-table-safe text: pipes escaped, newlines flattened, long text cut."""
    text = "" if value is None else str(value)
    text = text.replace("|", "\\|").replace("\r", " ").replace("\n", "<br>")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _write_report(measured: Measured, stem: str, figures: Figures) -> Path:
    run_dir, recipe, probes, outputs = (
        measured.run_dir,
        measured.recipe,
        measured.probes,
        measured.outputs,
    )
    table, bars, loss_plot = figures.table, figures.bars, figures.loss_plot
    generation = measured.generation
    settings = {"probes": measured.source, "seed": generation.seed, **dict(generation.settings())}
    warning = platform_warning_lines(measured.stages, bullet="- ")
    lines = [
        f"# Compare: recipe `{recipe}`",
        "",
        # Named by recipe and time, not by absolute path: the report travels with its folder.
        f"Run folder: `{run_dir.parent.name}/{run_dir.name}`  ",
        "Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        *([*warning, ""] if warning else []),
        "## Metrics",
        "",
        "```",
        table,
        "```",
        "",
        "exact_match: answer equals the reference after stripping whitespace; contains: the "
        "reference occurs in the answer (case-insensitive); eval_loss: the held-out loss as the "
        "stage's trainer measures it (TRL's tokens and loss masks with the stage's settings; "
        "the base with the first stage's). Every model is measured here on the full-precision "
        "base (adapters applied to the unquantized model); `run's own acc` and `run's own loss` "
        "are what the run measured when the stage was trained, on a 4/8-bit base where the "
        "stage was quantized (labelled), so they differ from this table's only by that base.",
        "",
    ]
    lines += [f"![{metric}]({path.name})" for metric, path in bars.items()]
    if figures.harness:
        lines += ["", *figures.harness]
    if loss_plot is not None:
        lines += ["", "## Loss over the run", "", f"![loss]({loss_plot.name})"]
    lines += ["", "## Side by side", "", *_side_by_side(probes, outputs)]
    if len(probes) > MD_ROWS:
        lines += ["", f"First {MD_ROWS} of {len(probes)} probes; all are in {stem}.csv."]
    path = run_dir / f"{stem}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def _side_by_side(probes: list[Probe], outputs: dict[str, list[str]]) -> list[str]:
    """The first MD_ROWS probes as a Markdown table: input, reference, each model's answer."""
    has_images = any(probe.image for probe in probes)
    header = ["#", "input", *(["image"] if has_images else []), "reference", *outputs]
    table = []
    for i, probe in enumerate(probes[:MD_ROWS]):
        image = [_cell(Path(probe.image.split(";")[0]).name)] if has_images else []
        cells = [str(i), _cell(probe.input), *image, _cell(probe.reference or "-")]
        table.append(cells + [_cell(answers[i]) for answers in outputs.values()])
    return markdown_table(table, header=header)


__all__ = [
    "CompareOutputs",
    "metrics_table",
    "newest_run",
    "platform_warning_lines",
    "render_compare",
]
