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

from recipe_engine.evaluate.probing import ModelVisitor, RunOverrides, measure_run
from recipe_engine.files import atomic_write_text
from recipe_engine.store.metric_text import accuracy_text, loss_text
from recipe_engine.store.scores import (
    Measured,
    ModelMetrics,
    RunLabels,
    Scored,
    Stage,
    metrics_json,
)


def score_run(
    run_dir: Path,
    *,
    probes: str | Path | None = None,
    overrides: RunOverrides | None = None,
    also: ModelVisitor | None = None,
) -> Scored:
    """The base and every stage of a finished run measured on one probe set
    (`evaluate.probing.measure_run`: `overrides` of the run's records, `also` shown each
    model while it is loaded), written."""
    measured = measure_run(run_dir, probes=probes, overrides=overrides, also=also)
    return write_scores(measured, probes)


def write_scores(measured: Measured, probes: str | Path | None = None) -> Scored:
    """The comparison's records in its run folder (named for `probes`, see `file_stem`)."""
    label_precision(measured.metrics, measured.stages, measured.root)
    stem = file_stem(probes)
    scored = Scored(
        measured,
        stem,
        csv=measured.run_dir / f"{stem}.csv",
        jsonl=measured.run_dir / f"{stem}.jsonl",
        metrics_path=measured.run_dir / f"{stem}_metrics.json",
    )
    _write_answers(scored)
    records = metrics_json(measured.metrics)
    atomic_write_text(scored.metrics_path, json.dumps(records, indent=2) + "\n")
    return scored


def file_stem(probes: str | Path | None) -> str:
    """The stem of the comparison's files: `compare` for the run's held-out split, which the
    run itself writes; `compare-<probe file stem>` for other probes, so they never replace it."""
    if probes is None:
        return "compare"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(probes).stem) or "probes"
    return f"compare-{stem}"


def label_precision(metrics: dict[str, ModelMetrics], stages: list[Stage], root: Stage) -> None:
    """Each model's row says what it was measured on (`measured_on`: the full-precision base
    where compare loaded it, adapters applied to the unquantized model; a 4/8-bit stage's
    quantized base where the run measured it in memory) next to the run's own held-out accuracy
    and loss, which a 4/8-bit stage measured on its quantized base (labelled so)."""
    base_name = next(iter(metrics))  # the base model answers first
    base = root[2].metrics.base_accuracy  # measured by the root stage, unquantized
    for name, values in metrics.items():
        accuracy = f"{base:.0%}" if name == base_name and base is not None else None
        # the run records no loss of the untrained base
        values.labels = RunLabels(accuracy, None, values.measured_on)
    for name, _, manifest in stages:
        on = metrics[name].measured_on
        metrics[name].labels = RunLabels(accuracy_text(manifest), loss_text(manifest), on)


def _write_answers(scored: Scored) -> None:
    """Every probe and each model's answer, as CSV and JSONL."""
    probes = scored.measured.probes
    outputs = scored.measured.outputs
    with scored.csv.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "input", "image", "reference", *(f"output_{m}" for m in outputs)])
        for i, probe in enumerate(probes):
            writer.writerow(
                [
                    i,
                    probe.input,
                    probe.image,
                    probe.reference or "",
                    *(o[i] for o in outputs.values()),
                ]
            )
    with scored.jsonl.open("w", encoding="utf-8") as handle:
        for i, probe in enumerate(probes):
            record = {
                "id": i,
                "input": probe.input,
                "image": probe.image or None,
                "reference": probe.reference,
                "outputs": {m: o[i] for m, o in outputs.items()},
            }
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
