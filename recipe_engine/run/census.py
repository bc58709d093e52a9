"""Per-component reports: trainable parameters, and a dtype/device census.

The census exists because parameter dtypes were the wrong first guess in a real
dtype failure (FIELD-NOTES 1): it shows, per component, what is stored where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from recipe_engine.config.components import Layout, as_layout, component_of, groups


def _logical_numel(param: Any) -> int:
    # bitsandbytes packs two 4-bit values per byte; count the weights, not the bytes.
    state = getattr(param, "quant_state", None)
    if type(param).__name__ == "Params4bit" and state is not None:
        return math.prod(state.shape)
    return param.numel()


def trainable_report(model: Any, *, layout: Layout | str) -> dict[str, dict]:
    """``{component: {"params", "trainable", "percent"}}`` plus ``"total"``.

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
    report = {c: _row(*counts[c]) for c in rows if counts[c][0]}
    report["total"] = _row(sum(r[0] for r in counts.values()), sum(r[1] for r in counts.values()))
    return report


def _row(params: int, trainable: int) -> dict:
    percent = round(100.0 * trainable / params, 4) if params else 0.0
    return {"params": params, "trainable": trainable, "percent": percent}


def census(model: Any, *, layout: Layout | str) -> dict[str, dict]:
    """Per component, element counts by stored dtype and by device.

    ``{"language_model": {"dtype": {"torch.uint8": n, "torch.bfloat16": m},
    "device": {"cpu": k}}}``. Counts storage elements (a 4-bit weight shows as half as
    many uint8), and includes PEFT's original_module copies since they occupy memory.
    """
    out: dict[str, dict] = {}
    for name, param in model.named_parameters():
        entry = out.setdefault(component_of(name, layout), {"dtype": {}, "device": {}})
        n = param.numel()
        dtype, device = str(param.dtype), str(param.device)
        entry["dtype"][dtype] = entry["dtype"].get(dtype, 0) + n
        entry["device"][device] = entry["device"].get(device, 0) + n
    return {c: out[c] for c in groups(as_layout(layout)) if c in out}


def format_report(report: Mapping[str, Mapping], census: Mapping[str, Mapping]) -> str:
    """A fixed-width table of both reports, one line per component, for logs."""

    def counts(entry: Mapping[str, int]) -> str:
        return ", ".join(f"{k.removeprefix('torch.')} {v:,}" for k, v in sorted(entry.items()))

    header = ("component", "params", "trainable", "%", "dtypes (elements)", "devices")
    rows = [header]
    for comp, row in report.items():
        cell = census.get(comp, {})
        rows.append(
            (
                comp,
                f"{row['params']:,}",
                f"{row['trainable']:,}",
                f"{row['percent']:.2f}",
                counts(cell.get("dtype", {})) if comp != "total" else "",
                ", ".join(sorted(cell.get("device", {}))) if comp != "total" else "",
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
