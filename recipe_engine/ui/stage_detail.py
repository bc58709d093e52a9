"""One stage's page: its plan (what is frozen, trained, LoRA, quantized; placement, n_gpu,
trainer settings), memory estimated against measured, its loss and eval curves, and the
cards of its exports.

A committed stage is read from its manifest (what the run actually did); a stage not yet
committed from the recipe's config the run saved (what it was asked to do).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

from recipe_engine.files import JsonObject
from recipe_engine.report.plots import read_metrics
from recipe_engine.store.records import Manifest
from recipe_engine.trainers import known_capabilities
from recipe_engine.ui.charts import Curve, curve
from recipe_engine.ui.paths import OutputFolder
from recipe_engine.ui.reports import markdown_html
from recipe_engine.ui.runs import StageView

EXPORT_RECORD = "export.json"


@dataclass(frozen=True)
class Export:
    """An export of the stage: its folder (relative) and its model card (README.md) as HTML."""

    path: str
    form: str
    card: Markup


@dataclass
class StageDetail:
    stage: StageView
    plan: list[tuple[str, str]]  # (what, value) rows
    trainer: list[tuple[str, str]]
    memory: list[tuple[str, str]]
    curves: list[Curve] = field(default_factory=list)
    exports: list[Export] = field(default_factory=list)
    source: str = "manifest"  # manifest | config: where the plan rows come from


def stage_detail(folder: OutputFolder, stage: StageView) -> StageDetail:
    store = folder.root / "store"
    manifest = stage.manifest(store)
    if manifest is not None:
        detail = StageDetail(stage, _plan_of(manifest), _pairs(manifest.trainer), _memory(manifest))
        detail.exports = exports_of(folder, manifest)
    else:
        settings = stage.settings
        detail = StageDetail(stage, _asked(settings), _pairs(settings.get("train") or {}), [])
        detail.source = "config"
    detail.curves = stage_curves(store, stage)
    return detail


def stage_curves(store: Path, stage: StageView) -> list[Curve]:
    """The training loss and, where the trainer evaluated, the eval loss, by step; what the
    capabilities of its kind draw of what it logged (an online stage's rewards); and, for a
    stage that generates, its completions' mean length."""
    if not stage.entry:
        return []
    folder = store / stage.entry
    if not folder.is_dir():
        folder = store / f"{stage.entry}.partial"
    records = read_metrics(folder / "metrics.jsonl")
    logged = list(dict.fromkeys(key for record in records for key in record))
    drawn = [pair for capability in known_capabilities() for pair in capability.curves(logged)]
    curves = [
        curve("training loss", records, "loss"),
        curve("eval loss", records, "eval_loss"),
        *(curve(label, records, key) for label, key in drawn),
        curve("completion length (tokens)", records, "completions/mean_length"),
    ]
    return [c for c in curves if c.points]


def _plan_of(manifest: Manifest) -> list[tuple[str, str]]:
    placement = manifest.placement
    rows = [
        ("trained", manifest.trained_text()),
        ("frozen", ", ".join(manifest.frozen_components) or "-"),
        ("LoRA", ", ".join(manifest.lora_components) or "-"),
        ("quantized", manifest.bits if manifest.bits != "none" else "-"),
        ("dtype", manifest.dtype),
        ("n_gpu", str(placement.n_gpu if placement else manifest.world_size)),
    ]
    recorded = dataclasses.asdict(placement) if placement else {}
    rows += [(f"placement: {k}", _text(v)) for k, v in recorded.items() if k != "n_gpu"]
    return rows


def _asked(settings: JsonObject) -> list[tuple[str, str]]:
    """What the recipe asks of a stage not committed yet (the plan decides the rest)."""
    lora = settings.get("lora") or {}
    quantization = settings.get("quantization") or {}
    bits = [k for k in ("load_in_4bit", "load_in_8bit") if quantization.get(k)]
    return [
        ("frozen", ", ".join((settings.get("freeze") or {}).get("components") or []) or "-"),
        ("LoRA", ", ".join(lora.get("components") or []) or "-"),
        ("quantized", ", ".join(b.removeprefix("load_in_") for b in bits) or "-"),
        ("dtype", str(settings.get("dtype", "auto"))),
        ("init", _text({k: v for k, v in (settings.get("init") or {}).items() if v})),
    ]


def _memory(manifest: Manifest) -> list[tuple[str, str]]:
    metrics = manifest.metrics
    if metrics.estimated_peak_gib is None and metrics.measured_peak_gib is None:
        return []
    rows = [
        ("estimated peak", _gib(metrics.estimated_peak_gib)),
        ("measured peak", _gib(metrics.measured_peak_gib)),
    ]
    if metrics.estimated_peak_gib and metrics.measured_peak_gib:
        ratio = metrics.measured_peak_gib / metrics.estimated_peak_gib
        rows.append(("measured / estimated", f"{ratio:.0%}"))
    if metrics.memory_measure:
        rows.append(("measured by", metrics.memory_measure))
    return rows


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} GiB"


def _pairs(settings: JsonObject) -> list[tuple[str, str]]:
    return [(str(k), _text(v)) for k, v in sorted(settings.items())]


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value) or "-"
    return "-" if value is None else str(value)


def exports_of(folder: OutputFolder, manifest: Manifest) -> list[Export]:
    """The exports under `<output_root>/exports/` of this stage (named
    `<recipe>-<stage>-<key>-<form>`, key 12 characters of the fingerprint), with their cards."""
    base = folder.root / "exports"
    prefix = f"{manifest.recipe}-{manifest.stage}-{manifest.fingerprint[:12]}-"
    found = []
    for path in sorted(base.glob(f"{prefix}*")) if base.is_dir() else []:
        record, card = path / EXPORT_RECORD, path / "README.md"
        if path.is_symlink() or not record.is_file() or not card.is_file():
            continue
        try:
            form = str(json.loads(record.read_text()).get("form", "?"))
        except (OSError, ValueError):
            continue
        relative = folder.relative(path)
        found.append(
            Export(relative, form, markdown_html(card.read_text(errors="replace"), relative))
        )
    return found
