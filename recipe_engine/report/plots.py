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

from recipe_engine.files import atomic_write_bytes

LOSS_PLOT = "loss.png"


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The JSON records of a stage's metrics.jsonl; a missing file or a bad line is skipped."""
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


@dataclass
class StageSeries:
    """One stage's loss points on the run's step axis: x = steps of earlier stages + step."""

    name: str
    start: float
    end: float
    train: list[tuple[float, float]] = field(default_factory=list)
    eval: list[tuple[float, float]] = field(default_factory=list)


def loss_series(stages: Sequence[tuple[str, Path]]) -> list[StageSeries]:
    """Per stage, its train/eval loss points shifted to start where the previous stage ended."""
    series, offset = [], 0.0
    for name, metrics_path in stages:
        records = read_metrics(Path(metrics_path))
        last = max((float(r["step"]) for r in records), default=0.0)
        series.append(
            StageSeries(
                name,
                offset,
                offset + last,
                [(offset + r["step"], r["loss"]) for r in records if _number(r.get("loss"))],
                [
                    (offset + r["step"], r["eval_loss"])
                    for r in records
                    if _number(r.get("eval_loss"))
                ],
            )
        )
        offset += last
    return series


def write_loss_plot(run_dir: Path, stages: Sequence[tuple[str, Path]]) -> Path | None:
    """Plot train and eval loss of every stage on one step axis; returns run_dir/loss.png
    (None without matplotlib).

    `stages` are (stage name, metrics.jsonl) in run order. Stage k's steps are drawn after
    stage k-1's last step; a dashed line and the stage's name mark where each stage starts.
    Cached stages read their stored metrics.jsonl and are drawn the same way.
    """
    if not can_plot():
        return None
    figure = _figure(8, 4.5)
    axes = figure.add_subplot(1, 1, 1)
    series = loss_series(stages)
    legend: set[str] = set()
    for index, stage in enumerate(series):
        for points, label, color, marker in (
            (stage.train, "train loss", "tab:blue", "."),
            (stage.eval, "eval loss", "tab:orange", "o"),
        ):
            if points:
                xs, ys = zip(*points, strict=True)
                # One legend entry per series, not per stage: colours stay fixed across stages.
                shown = label if label not in legend else "_nolegend_"
                legend.add(label)
                axes.plot(xs, ys, color=color, marker=marker, linewidth=1.5, label=shown)
        if index > 0:
            axes.axvline(stage.start, color="grey", linestyle="--", linewidth=1)
    drawn = bool(legend)
    offset = series[-1].end if series else 0.0
    spans = [(s.name, s.start, s.end) for s in series]
    for index, (name, start, end) in enumerate(spans):
        if index % 2 and end > start:
            axes.axvspan(start, end, color="grey", alpha=0.08, linewidth=0)
        # Names sit at the top of each stage's span, in axes coordinates vertically.
        axes.text(
            (start + end) / 2 if end > start else start,
            0.98,
            name,
            transform=axes.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
            bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.8},
        )
    if not drawn:
        axes.text(0.5, 0.5, "no loss records", transform=axes.transAxes, ha="center")
    axes.margins(y=0.2)  # headroom for the stage names at the top
    if offset > 0:
        axes.set_xlim(0, offset * 1.02)  # step 0 is each stage's start: show it
    axes.set_xlabel("step (all stages, run order)")
    axes.set_ylabel("loss")
    axes.set_title(f"loss over {len(stages)} stage(s)")
    axes.grid(True, alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if handles:
        axes.legend(loc="upper right", bbox_to_anchor=(1.0, 0.9))
    figure.tight_layout()
    return _save(figure, Path(run_dir) / LOSS_PLOT)


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
    "StageSeries",
    "loss_series",
    "read_metrics",
    "write_loss_plot",
    "write_metric_bars",
]
