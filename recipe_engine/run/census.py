"""Per-component reports: trainable parameters, and a dtype/device census.

The census exists because parameter dtypes were the wrong first guess in a real
dtype failure (FIELD-NOTES 1): it shows, per component, what is stored where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from recipe_engine.config.components import Layout
from recipe_engine.plan.components import as_layout, component_of, groups
from recipe_engine.store.stage_records import (
    Census,
    ComponentCensus,
    TrainableCount,
    TrainableReport,
)


def _logical_numel(param: Any) -> int:
    # bitsandbytes packs two 4-bit values per byte; count the weights, not the bytes.
    state = getattr(param, "quant_state", None)
    if type(param).__name__ == "Params4bit" and state is not None:
        return math.prod(state.shape)
    return param.numel()


def trainable_report(model: Any, *, layout: Layout | str) -> TrainableReport:
    """A `TrainableCount` per component, plus ``"total"``.

    Rows are the layout's groups: components, or the user's regexes for a model with no map.

    Counts logical parameters (4-bit weights unpacked). PEFT's frozen
    ``original_module`` copies behind ``modules_to_save`` are left out: they duplicate
    the trained copy and would halve the percentage.
    """
    rows = groups(as_layout(layout))
    counts = {c: [0, 0] for c in rows}
    for name, param in model.named_parameters():
        if ".original_module." in name:
            continue
        n = _logical_numel(param)
        row = counts[component_of(name, layout)]
        row[0] += n
        row[1] += n if param.requires_grad else 0
    report = {c: TrainableCount.of(*counts[c]) for c in rows if counts[c][0]}
    params = sum(row[0] for row in counts.values())
    report["total"] = TrainableCount.of(params, sum(row[1] for row in counts.values()))
    return report


def census(model: Any, *, layout: Layout | str) -> Census:
    """Per component, element counts by stored dtype ("torch.uint8") and by device ("cpu").

    Counts storage elements (a 4-bit weight shows as half as many uint8), and includes
    PEFT's original_module copies since they occupy memory.
    """
    out: Census = {}
    for name, param in model.named_parameters():
        entry = out.setdefault(component_of(name, layout), ComponentCensus())
        n = param.numel()
        dtype, device = str(param.dtype), str(param.device)
        entry.dtype[dtype] = entry.dtype.get(dtype, 0) + n
        entry.device[device] = entry.device.get(device, 0) + n
    return {c: out[c] for c in groups(as_layout(layout)) if c in out}


def format_report(report: TrainableReport, census: Census) -> str:
    """A fixed-width table of both reports, one line per component, for logs."""

    def counts(entry: Mapping[str, int]) -> str:
        return ", ".join(f"{k.removeprefix('torch.')} {v:,}" for k, v in sorted(entry.items()))

    header = ("component", "params", "trainable", "%", "dtypes (elements)", "devices")
    rows = [header]
    for comp, row in report.items():
        cell = census.get(comp, ComponentCensus())
        rows.append(
            (
                comp,
                f"{row.params:,}",
                f"{row.trainable:,}",
                f"{row.percent:.2f}",
                counts(cell.dtype) if comp != "total" else "",
                ", ".join(sorted(cell.device)) if comp != "total" else "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for r in rows:
        left, nums, rest = r[0].ljust(widths[0]), r[1:4], r[4:]
        cells = [left, *(c.rjust(w) for c, w in zip(nums, widths[1:4], strict=True))]
        cells += [c.ljust(w) for c, w in zip(rest, widths[4:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
