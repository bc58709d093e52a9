"""A comparison's scores as records in its run folder: `<stem>_metrics.json` (each model's
metrics, labelled with the base precision compare measured on, beside the accuracy and loss the
run measured itself), `<stem>.csv` and `<stem>.jsonl` (every probe and each model's answer).
`report.compare` renders them; `evaluate.probing` measures them.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from recipe_engine.evaluate.probing import measure_run
from recipe_engine.files import atomic_write_text
from recipe_engine.store.metric_text import accuracy_text, loss_text
from recipe_engine.store.scores import Measured, Scored, Stage


def score_run(run_dir: Path, *, probes: str | Path | None = None, **measuring: Any) -> Scored:
    """The base and every stage of a finished run measured on one probe set (by
    `evaluate.probing.measure_run`, which takes `overrides` and `also`), written."""
    return write_scores(measure_run(run_dir, probes=probes, **measuring), probes)


def write_scores(measured: Measured, probes: str | Path | None = None) -> Scored:
    """The comparison's records in its run folder (named for `probes`, see `file_stem`)."""
    label_precision(measured.metrics, measured.stages, measured.root)
    stem = file_stem(probes)
    paths = _write_records(measured.run_dir, stem, measured.rows, measured.outputs)
    atomic_write_text(paths["metrics_path"], json.dumps(measured.metrics, indent=2) + "\n")
    return Scored(measured, stem, **paths)


def file_stem(probes: str | Path | None) -> str:
    """The stem of the comparison's files: `compare` for the run's held-out split, which the
    run itself writes; `compare-<probe file stem>` for other probes, so they never replace it."""
    if probes is None:
        return "compare"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(probes).stem) or "probes"
    return f"compare-{stem}"


def label_precision(metrics: dict[str, dict[str, Any]], stages: list[Stage], root: Stage) -> None:
    """Each model's row says what compare measured it on (always the full-precision base:
    adapters are applied to the unquantized model) next to the run's own held-out accuracy and
    loss, which a 4/8-bit stage measured on its quantized base (labelled so)."""
    base_name = next(iter(metrics))  # the base model answers first
    base = root[2].metrics.base_accuracy  # measured by the root stage, unquantized
    for name, values in metrics.items():
        values["base_precision"] = "full"
        values["run_accuracy"] = f"{base:.0%}" if name == base_name and base is not None else None
        values["run_loss"] = None  # the run records no loss of the untrained base
    for name, _, manifest in stages:
        metrics[name]["run_accuracy"] = accuracy_text(manifest)
        metrics[name]["run_loss"] = loss_text(manifest)


def _write_records(
    run_dir: Path, stem: str, rows: list[dict[str, Any]], outputs: dict[str, list[str]]
) -> dict[str, Path]:
    """Every probe and each model's answer, as CSV and JSONL; the paths of all three records."""
    paths = {
        "csv": run_dir / f"{stem}.csv",
        "jsonl": run_dir / f"{stem}.jsonl",
        "metrics_path": run_dir / f"{stem}_metrics.json",
    }
    with paths["csv"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "input", "image", "reference", *(f"output_{m}" for m in outputs)])
        for i, row in enumerate(rows):
            writer.writerow(
                [
                    i,
                    row["input"],
                    row["image"],
                    row["reference"] or "",
                    *(o[i] for o in outputs.values()),
                ]
            )
    with paths["jsonl"].open("w", encoding="utf-8") as handle:
        for i, row in enumerate(rows):
            record = {
                "id": i,
                "input": row["input"],
                "image": row["image"] or None,
                "reference": row["reference"],
                "outputs": {m: o[i] for m, o in outputs.items()},
            }
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return paths
