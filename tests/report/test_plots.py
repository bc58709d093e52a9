"""Loss plot across stages and metric bars: one step axis, valid PNGs, no display needed."""

from __future__ import annotations

import json
from pathlib import Path

from recipe_engine.report.plots import (
    PlotStage,
    loss_series,
    write_loss_plot,
    write_metric_bars,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return (
        path.is_file()
        and path.stat().st_size > len(PNG_SIGNATURE)
        and (path.read_bytes()[:8] == PNG_SIGNATURE)
    )


def write_metrics(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def stage_records(steps: int, start_loss: float) -> list[dict]:
    records = [
        {"step": s, "epoch": s / steps, "loss": start_loss - 0.1 * s} for s in range(1, steps + 1)
    ]
    records.append({"step": steps, "train_runtime": 1.0, "train_loss": start_loss})
    records.append({"step": steps, "eval_loss": start_loss - 0.05 * steps})
    return records


def test_stages_share_one_step_axis(tmp_path):
    first = write_metrics(tmp_path / "a" / "metrics.jsonl", stage_records(3, 5.0))
    second = write_metrics(tmp_path / "b" / "metrics.jsonl", stage_records(4, 4.0))
    stages = [PlotStage("vision", None, first), PlotStage("llm", "vision", second)]
    series = loss_series(stages)
    assert [(s.name, s.start, s.end) for s in series] == [("vision", 0, 3), ("llm", 3, 7)]
    assert [x for x, _ in series[1].train] == [4, 5, 6, 7]  # continues after stage 1's steps
    assert series[0].eval == [(3, 5.0 - 0.15)] and series[1].eval == [(7, 4.0 - 0.2)]
    plot = write_loss_plot(tmp_path / "run", stages)
    assert plot == tmp_path / "run" / "loss.png" and is_png(plot)


def test_siblings_branch_from_their_parent_not_from_each_other(tmp_path):
    """Fan-out: B starts where its parent ended, not after its sibling A; a grandchild
    starts where its own parent (B) ended."""
    path = {n: tmp_path / n / "metrics.jsonl" for n in ("root", "a", "b", "c")}
    for name, steps in (("root", 3), ("a", 5), ("b", 2), ("c", 4)):
        write_metrics(path[name], stage_records(steps, 4.0))
    parents = {"root": None, "a": "root", "b": "root", "c": "b"}
    stages = [PlotStage(n, parents[n], path[n]) for n in parents]
    series = loss_series(stages)
    assert [(s.name, s.start, s.end) for s in series] == [
        ("root", 0, 3),
        ("a", 3, 8),
        ("b", 3, 5),  # not (8, 10): b does not start from a
        ("c", 5, 9),
    ]
    assert [s.depth for s in series] == [0, 1, 1, 2]
    assert is_png(write_loss_plot(tmp_path / "run", stages))


def test_missing_or_damaged_metrics_still_plot(tmp_path):
    damaged = tmp_path / "c" / "metrics.jsonl"
    damaged.parent.mkdir()
    damaged.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')  # cut short mid-write
    gone = PlotStage("gone", None, tmp_path / "none.jsonl")
    series = loss_series([gone, PlotStage("cut", "gone", damaged)])
    assert series[0].train == [] and series[1].train == [(1, 2.0)]
    assert is_png(write_loss_plot(tmp_path, [gone]))


def test_metric_bars(tmp_path):
    path = write_metric_bars(tmp_path / "bars.png", {"base": 0.0, "vision": 0.5, "llm": 1.0}, "EM")
    assert is_png(path)
    assert is_png(write_metric_bars(tmp_path / "loss.png", {"base": 5.8, "llm": 4.9}, "loss"))


def test_without_matplotlib_the_charts_are_skipped_not_failed(tmp_path, monkeypatch):
    """matplotlib is the `plots` extra: a run without it reports no chart and writes none."""
    import importlib.util

    from recipe_engine.report import plots

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a),
    )
    metrics = write_metrics(tmp_path / "a" / "metrics.jsonl", stage_records(3, 5.0))
    assert plots.write_loss_plot(tmp_path, [plots.PlotStage("a", None, metrics)]) is None
    assert plots.write_metric_bars(tmp_path / "bars.png", {"base": 0.5}, "EM") is None
    assert not list(tmp_path.glob("*.png"))
