"""The experiment's files: experiment.md (table, verdict, charts, the settings that differ,
the runs), experiment.csv (one row per recipe and seed, and the base) and the bar charts."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from recipe_engine.config.schema import EvalConfig
from recipe_engine.files import atomic_write_text
from recipe_engine.report.experiment import (
    BASE,
    COLUMNS,
    METRICS,
    RecipeRun,
    RecipeSummary,
    Score,
    answer_line,
    base_per_seed,
    base_summary,
    differences_sentence,
    experiment_table,
    measurement,
    summarize,
    table_rows,
)
from recipe_engine.report.plots import MISSING, write_metric_bars
from recipe_engine.report.preference import (
    experiment_judged,
    judged_table,
    preference_answer,
    table_for,
)
from recipe_engine.store.records import platform_lines, relative_to
from recipe_engine.tables import markdown_table


@dataclass
class Experiment:
    """Everything the report shows."""

    runs: list[RecipeRun]
    settings: EvalConfig  # the evaluation settings every model was measured with
    differences: str  # the rendered settings diff between the recipes
    probes: str = "the held-out split of the shared data"

    @property
    def recipes(self) -> list[str]:
        return list(dict.fromkeys(run.recipe for run in self.runs))


@dataclass(frozen=True)
class WrittenExperiment:
    """What `write_experiment` wrote, and what the command prints of it."""

    title: str  # "experiment: A vs B (seed 0, 1)"
    table: str  # the results, as printed
    platform_warning: list[str]  # where the recipes trained on different platforms
    differences: str  # each recipe against the best, with the 95% intervals
    preference: list[str]  # the judged rows' table and answer (none judged: empty)
    report: Path  # experiment.md
    csv: Path  # experiment.csv
    plots: dict[str, Path | None]  # metric -> its bar chart (None: matplotlib is missing)
    answer: str  # the one line that answers the question

    def printed(self) -> list[str]:
        """The lines the command prints: the answer last."""
        charts = [str(path) for path in self.plots.values() if path is not None]
        chart_text = ", ".join(charts) if charts else MISSING if self.plots else "-"
        return [
            self.title,
            self.table,
            *self.platform_warning,
            self.differences,
            *self.preference,
            f"report: {self.report}",
            f"table:  {self.csv}",
            f"charts: {chart_text}",
            self.answer,
        ]


def write_experiment(folder: Path, experiment: Experiment) -> WrittenExperiment:
    """experiment.md, experiment.csv and a bar chart per metric in `folder`; returns the
    paths and what the command prints."""
    folder.mkdir(parents=True, exist_ok=True)
    summaries = summarize(experiment.runs)
    base = base_summary(experiment.runs)
    csv_path = _write_csv(folder / "experiment.csv", experiment.runs)
    charts = _write_bars(folder, [*([base] if base else []), *summaries])
    lines = _report_lines(folder, experiment, charts)
    report = folder / "experiment.md"
    atomic_write_text(report, "\n".join(lines) + "\n")
    judged = experiment_judged(experiment.runs)
    preference = [*judged_table(judged), *filter(None, [preference_answer(experiment.runs)])]
    seeds = ", ".join(str(seed) for seed in sorted({run.seed for run in experiment.runs}))
    return WrittenExperiment(
        title=f"experiment: {' vs '.join(experiment.recipes)} (seed {seeds})",
        table=experiment_table(summaries, base),
        platform_warning=platform_warning_lines(experiment.runs),
        differences=differences_sentence(summaries),
        preference=preference if any(judged.values()) else [],
        report=report,
        csv=csv_path,
        plots=charts,
        answer=answer_line(summaries),
    )


def platform_warning_lines(runs: Sequence[RecipeRun], *, bullet: str = "  ") -> list[str]:
    """A warning, and which recipe ran where, when the recipes' stages were trained on
    different platforms: a difference between them may then be partly the platforms'."""
    labelled = [(run.recipe, platform) for run in runs for platform in run.platforms]
    return platform_lines("the recipes compared", labelled, bullet=bullet)


@dataclass(frozen=True)
class CsvRow:
    """One row of experiment.csv: a recipe's final stage or the base, for one seed (a cell
    left None is empty: the base has no costs, an unscored model no metrics)."""

    recipe: str
    seed: int
    model: str
    exact_match: float | None = None
    contains: float | None = None
    eval_loss: float | None = None
    samples: int | None = None
    base_precision: str | None = None
    source: str | None = None
    trained: str | None = None
    steps: int | None = None
    wall_s: float | None = None
    peak_gib: float | None = None
    run_dir: str | None = None


CSV_FIELDS = tuple(column.name for column in fields(CsvRow))


def _write_csv(path: Path, runs: Sequence[RecipeRun]) -> Path:
    """One row per (recipe, seed) for its final stage, and one per seed for the base."""
    rows = [
        _csv_row(run.recipe, run, run.final_stage, run.score, costs=path.parent) for run in runs
    ]
    rows += [_csv_row(BASE, run, BASE, score) for run, score in base_per_seed(runs).values()]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)
    return path


def _csv_row(
    recipe: str, run: RecipeRun, model: str, score: Score | None, *, costs: Path | None = None
) -> CsvRow:
    """A CSV row; `costs`: the report folder, for a recipe's row (its costs and run folder,
    relative to the report like every path the engine records)."""
    row = CsvRow(recipe, run.seed, model)
    if score is not None:
        row = replace(
            row,
            exact_match=score.exact_match,
            contains=score.contains,
            eval_loss=score.eval_loss,
            samples=score.samples,
            base_precision=score.precision,
            source=score.source,
        )
    if costs is not None:
        row = replace(
            row,
            trained=run.trained,
            steps=run.steps,
            wall_s=round(run.wall_s, 1),
            peak_gib=run.peak_gib,
            run_dir=relative_to(run.run_dir, costs),
        )
    return row


def _write_bars(folder: Path, summaries: Sequence[RecipeSummary]) -> dict[str, Path | None]:
    """A bar chart of each metric's mean per model (models without the metric left out);
    None where matplotlib is missing."""
    charts: dict[str, Path | None] = {}
    for metric, (title, _) in METRICS.items():
        values = {s.recipe: s.metrics[metric] for s in summaries}
        means = {name: spread.mean for name, spread in values.items() if spread is not None}
        if len(means) >= 2:
            charts[metric] = write_metric_bars(folder / f"experiment_{metric}.png", means, title)
    return charts


def _report_lines(
    folder: Path, experiment: Experiment, charts: Mapping[str, Path | None]
) -> list[str]:
    summaries = summarize(experiment.runs)
    base = base_summary(experiment.runs)
    answer = answer_line(summaries)
    seeds = ", ".join(str(s) for s in summaries[0].seeds)
    settings = ", ".join(f"{k}={v}" for k, v in measurement(experiment.settings))
    warning = platform_warning_lines(experiment.runs, bullet="- ")
    lines = [
        f"# Experiment: {' vs '.join(experiment.recipes)}",
        "",
        f"Seeds: {seeds}  ",
        f"Probes: {experiment.probes}; the same for every model  ",
        f"Evaluation: {settings}",
        "",
        *([*warning, ""] if warning else []),
        "## Results",
        "",
        *markdown_table(table_rows(summaries, base), header=COLUMNS),
        "",
        _legend(experiment.runs),
        "",
        differences_sentence(summaries),
        "",
        f"**{answer}**",
        "",
        *_preference_lines(experiment.runs),
        "## Bar charts",
        "",
    ]
    lines += [_chart_line(metric, path) for metric, path in charts.items()] or ["(none)"]
    lines += ["", "## Settings that differ", "", "```", experiment.differences, "```", ""]
    return lines + ["## Runs", "", *_run_lines(folder, experiment.runs)]


def _preference_lines(runs: Sequence[RecipeRun]) -> list[str]:
    """The judged rows' section (preference pairs, unpaired feedback), where a recipe has a
    preference stage."""
    judged = experiment_judged(runs)
    table = table_for(judged)
    if table is None:
        return []
    answer = preference_answer(runs)
    return [
        f"## {table.title.capitalize()}",
        "",
        *judged_table(judged, markdown=True),
        "",
        table.rule + ".",
        "",
        *([f"**{answer}**", ""] if answer else []),
    ]


def _legend(runs: Sequence[RecipeRun]) -> str:
    measured = sorted({run.memory_measure for run in runs if run.memory_measure})
    evaluated = sorted({run.recipe for run in runs if run.score and run.score.source != "stored"})
    lines = [
        "Each recipe's final stage and the untrained base, on the same held-out probes with "
        "the same generation settings. An accuracy without a label was measured on the "
        "full-precision base; `(4-bit base)`: a QLoRA stage measured on the 4-bit base it "
        "trained on (its eval loss too). Over several seeds a cell reads `mean [min..max]`. "
        "`steps`, `wall s` (training wall time, as recorded when each stage trained; "
        "`(cached)`: reused from the store, so timed in an earlier run) and `peak GiB` (the "
        "largest measured peak of its stages) cover all of a recipe's stages; `trained` lists "
        "what had trainable parameters (a share where freeze.patterns left part of a "
        "component). The base has no eval loss of its own unless measured here.",
    ]
    if measured:
        lines.append(f"Peak memory measured by: {'; '.join(measured)}.")
    if evaluated:
        lines.append(
            f"Measured by this experiment (their stored evaluation used other settings): "
            f"{', '.join(evaluated)}."
        )
    return " ".join(lines)


def _chart_line(metric: str, path: Path | None) -> str:
    return f"![{metric}]({path.name})" if path is not None else f"{metric}: {MISSING}"


def _run_lines(folder: Path, runs: Sequence[RecipeRun]) -> list[str]:
    return [
        f"- {run.recipe}, seed {run.seed}: `{relative_to(run.run_dir, folder)}`" for run in runs
    ]
