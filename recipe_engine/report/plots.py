"""Headless PNG plots: the run's loss curve across stages and per-model metric bars.

Figures are drawn with matplotlib's object API on the Agg canvas, never through pyplot, so
plotting needs no display, leaves no global figure state behind and works from any thread.
"""

from __future__ import annotations

import importlib.util
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.files import JsonObject, atomic_write_bytes

LOSS_PLOT = "loss.png"


def read_metrics(path: Path) -> list[JsonObject]:
    """The JSON records of a stage's metrics.jsonl (what the Trainer logged, by step); a
    missing file or a bad line is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by an interrupted write must not break the plot
        if isinstance(record, dict) and isinstance(record.get("step"), (int, float)):
            records.append(record)
    return records


# matplotlib is the `plots` extra: without it the runs and reports go on without their charts.
MISSING = "skipped: matplotlib is not installed (pip install 'recipe-engine[plots]')"


def can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)  # Agg explicitly: no display is needed or consulted
    return figure


def _save(figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    figure.savefig(png, format="png")
    atomic_write_bytes(path, png.getvalue())  # a reader never sees a half-written PNG
    return path


@dataclass(frozen=True)
class PlotStage:
    """A stage as the loss plot needs it: its name, its parent and its metrics.jsonl."""

    name: str
    parent: str | None  # the stage it starts from; None: a root, drawn from step 0
    metrics: Path


@dataclass
class StageSeries:
    """One stage's loss points on the run's step axis: x = its parent's end + step."""

    name: str
    start: float
    end: float
    train: list[tuple[float, float]] = field(default_factory=list)
    eval: list[tuple[float, float]] = field(default_factory=list)
    depth: int = 0  # stages between it and its root: siblings share a start, not a depth row


def loss_series(stages: Sequence[PlotStage]) -> list[StageSeries]:
    """Per stage (parents listed before children), its train/eval loss points shifted to
    start where its parent ended: a fan-out draws branches, not one stage after another."""
    series: list[StageSeries] = []
    ends: dict[str, tuple[float, int]] = {}  # stage -> (its last step on the axis, its depth)
    for stage in stages:
        # A parent outside the list (e.g. not part of an `only=` run) counts as a root.
        parent_end, parent_depth = ends.get(stage.parent or "", (0.0, -1))
        records = read_metrics(Path(stage.metrics))
        last = max((float(r["step"]) for r in records), default=0.0)
        series.append(
            StageSeries(
                stage.name,
                parent_end,
                parent_end + last,
                _points(records, "loss", parent_end),
                _points(records, "eval_loss", parent_end),
                parent_depth + 1,
            )
        )
        ends[stage.name] = (parent_end + last, parent_depth + 1)
    return series


def _points(records: list[JsonObject], key: str, offset: float) -> list[tuple[float, float]]:
    return [(offset + r["step"], r[key]) for r in records if _number(r.get(key))]


def write_loss_plot(run_dir: Path, stages: Sequence[PlotStage]) -> Path | None:
    """Plot train and eval loss of every stage on one step axis; returns run_dir/loss.png
    (None without matplotlib).

    `stages` are listed parents first. Each stage's steps are drawn after its parent's last
    step, so the children of one parent overlap as branches; each stage has its own colour
    (solid: train loss, dots: eval loss), and a dashed line and its name mark where it starts.
    Cached stages read their stored metrics.jsonl and are drawn the same way.
    """
    if not can_plot():
        return None
    figure = _figure(8, 4.5)
    axes = figure.add_subplot(1, 1, 1)
    series = loss_series(stages)
    drawn = False
    for index, stage in enumerate(series):
        drawn = _draw_stage(axes, stage, f"C{index % 10}") or drawn
    _label_stages(axes, series)
    if not drawn:
        axes.text(0.5, 0.5, "no loss records", transform=axes.transAxes, ha="center")
    axes.margins(y=0.2)  # headroom for the stage names at the top
    right = max((s.end for s in series), default=0.0)
    if right > 0:
        axes.set_xlim(0, right * 1.02)  # step 0 is each root's start: show it
    axes.set_xlabel("step (each stage from its parent's last step)")
    axes.set_ylabel("loss")
    axes.set_title(f"loss over {len(stages)} stage(s)")
    axes.grid(True, alpha=0.3)
    handles, _ = axes.get_legend_handles_labels()
    if handles:
        axes.legend(loc="upper right", bbox_to_anchor=(1.0, 0.85), fontsize=8)
    figure.tight_layout()
    return _save(figure, Path(run_dir) / LOSS_PLOT)


def _draw_stage(axes: Any, stage: StageSeries, color: str) -> bool:
    """A stage's train line and eval dots in its colour; True when it had any points."""
    if stage.train:
        xs, ys = zip(*stage.train, strict=True)
        axes.plot(xs, ys, color=color, marker=".", linewidth=1.5, label=f"{stage.name} train")
    if stage.eval:
        xs, ys = zip(*stage.eval, strict=True)
        axes.plot(xs, ys, color=color, marker="o", linestyle="none", label=f"{stage.name} eval")
    if stage.start > 0:
        axes.axvline(stage.start, color="grey", linestyle="--", linewidth=1)
    return bool(stage.train or stage.eval)


def _label_stages(axes: Any, series: list[StageSeries]) -> None:
    """Each stage's name at the top of its span; branches (same start) stack downwards."""
    starts: dict[float, int] = {}
    for stage in series:
        row = starts.get(stage.start, 0)
        starts[stage.start] = row + 1
        if stage.depth % 2 and stage.end > stage.start and row == 0:
            axes.axvspan(stage.start, stage.end, color="grey", alpha=0.08, linewidth=0)
        axes.text(
            (stage.start + stage.end) / 2 if stage.end > stage.start else stage.start,
            0.98 - 0.08 * row,  # axes coordinates vertically
            stage.name,
            transform=axes.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
            bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.8},
        )


def write_metric_bars(path: Path, metric: dict[str, float], title: str) -> Path | None:
    """A bar chart of one metric per model (in the dict's order), value printed on each bar
    (None without matplotlib)."""
    if not can_plot():
        return None
    figure = _figure(max(4.0, 1.2 * len(metric) + 2), 3.5)
    axes = figure.add_subplot(1, 1, 1)
    names = list(metric)
    values = [float(metric[n]) for n in names]
    bars = axes.bar(range(len(names)), values, color="tab:blue")
    axes.set_xticks(range(len(names)), names)
    axes.bar_label(bars, labels=[f"{v:.3g}" for v in values], padding=2)
    if values and all(0.0 <= v <= 1.0 for v in values):
        # Shares keep a fixed 0..1 axis so charts of different runs compare by eye.
        axes.set_ylim(0, 1.1)
    axes.set_title(title)
    axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    return _save(figure, Path(path))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


__all__ = [
    "LOSS_PLOT",
    "PlotStage",
    "StageSeries",
    "loss_series",
    "read_metrics",
    "write_loss_plot",
    "write_metric_bars",
]
