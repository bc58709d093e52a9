"""Curves of several runs on one chart: each (stage, metric) that the ticked runs logged is a
chart, each run a line in its own colour and dash, on shared axes, with a legend naming the
run (its recipe and seed where known). Drawn as SVG geometry, as `ui.charts` draws one curve.

An experiment's runs are grouped by recipe and seed from its `experiment.csv` (the run folder
of each recipe and seed), so its page can offer them to tick.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.ui.charts import Curve
from recipe_engine.ui.paths import OutputFolder, Refused
from recipe_engine.ui.runs import read_run, training_runs
from recipe_engine.ui.stage_detail import stage_curves

# Okabe and Ito's colour-blind-safe palette (on white, each at least 3:1), and a dash each.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#56b4e9", "#e69f00", "#000000")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 4")
MAX_RUNS = len(COLOURS)


@dataclass(frozen=True)
class Line:
    """One run's curve on a chart."""

    label: str
    run: str  # relative to output_root
    colour: str
    dash: str
    curve: Curve


@dataclass
class OverlayChart:
    """One metric of one stage, every ticked run that logged it as a line."""

    stage: str
    metric: str
    lines: list[Line] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"stage {self.stage}: {self.metric}"

    def bounds(self) -> tuple[float, float, float, float]:
        boxes = [line.curve.bounds() for line in self.lines]
        return (
            min(b[0] for b in boxes),
            max(b[1] for b in boxes),
            min(b[2] for b in boxes),
            max(b[3] for b in boxes),
        )

    def points(self, line: Line) -> str:
        """The line's polyline on the chart's shared axes."""
        return line.curve.polyline(self.bounds())

    def marker(self, line: Line) -> tuple[str, str] | None:
        """A line of one point, drawn as a dot at its place on the shared axes."""
        return line.curve.marker(self.bounds())


@dataclass(frozen=True)
class RunChoice:
    """A run offered to tick: where it is, what it is called, and whether it is ticked."""

    run: str
    label: str
    ticked: bool = False


def overlay(
    folder: OutputFolder, runs: Sequence[str], labels: dict[str, str]
) -> list[OverlayChart]:
    """The charts of the ticked runs (at most MAX_RUNS, in the order given), one per stage and
    metric any of them logged; `labels` names the runs in the legend."""
    if len(runs) > MAX_RUNS:
        raise Refused(f"tick at most {MAX_RUNS} runs: one colour each")
    trained_by = training_runs(folder)
    charts: dict[tuple[str, str], OverlayChart] = {}
    store = folder.root / "store"
    for index, run in enumerate(dict.fromkeys(runs)):
        view = read_run(folder, folder.run_folder(run), trained_by)
        for stage in view.stages:
            for curve in stage_curves(store, stage):
                chart = charts.setdefault(
                    (stage.name, curve.name), OverlayChart(stage.name, curve.name)
                )
                label = labels.get(run) or run
                chart.lines.append(Line(label, run, COLOURS[index], DASHES[index], curve))
    return list(charts.values())


@dataclass(frozen=True)
class Member:
    """A run of an experiment: its recipe and seed, its folder, its final stage's score."""

    recipe: str
    seed: int
    run: str  # relative to output_root
    exact_match: str

    @property
    def label(self) -> str:
        return f"{self.recipe} seed {self.seed}"


@dataclass
class Groups:
    """An experiment's runs by recipe (rows) and seed (columns)."""

    seeds: list[int]
    recipes: dict[str, dict[int, Member]]

    def members(self) -> list[Member]:
        return [m for by_seed in self.recipes.values() for m in by_seed.values()]

    def labels(self) -> dict[str, str]:
        return {member.run: member.label for member in self.members()}


def experiment_groups(folder: OutputFolder, report: str) -> Groups:
    """The runs of the experiment whose report is `report` (relative), from the
    experiment.csv beside it: one row per recipe and seed (the base's rows left out)."""
    path = folder.engine_file(report.rsplit("/", 1)[0] + "/experiment.csv")
    members: dict[str, dict[int, Member]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if not row.get("run_dir") or row.get("model") == "base":
                continue
            where = (path.parent / row["run_dir"]).resolve()
            if not where.is_relative_to(folder.root):
                continue
            run = where.relative_to(folder.root).as_posix()
            score = row.get("exact_match") or ""
            shown = f"{float(score):.0%}" if score else "-"
            seed = int(row["seed"])
            members.setdefault(row["recipe"], {})[seed] = Member(row["recipe"], seed, run, shown)
    seeds = sorted({seed for by_seed in members.values() for seed in by_seed})
    return Groups(seeds, members)


def sweep_runs(folder: OutputFolder, sweep: str, outputs: Sequence[str | None]) -> list[str | None]:
    """Each sweep job's run folder (relative to output_root), None where it has none."""
    found: list[str | None] = []
    base = folder.root / sweep
    for output in outputs:
        path = (base / output).resolve() if output else None
        ok = path is not None and path.is_relative_to(folder.root) and path.is_dir()
        found.append(path.relative_to(folder.root).as_posix() if ok and path else None)
    return found


def ticked(values: Sequence[str], offered: Sequence[str]) -> list[str]:
    """The ticked runs that are among those offered (in the offered order)."""
    wanted = set(values)
    return [run for run in offered if run in wanted]


def label_of(run: str) -> str:
    """A run's short name: its recipe and start time."""
    parts = Path(run).parts
    return " ".join(parts[-2:]) if len(parts) >= 2 else run
