"""Curves (loss, eval loss by step) as SVG geometry: the page draws a polyline in a fixed
view box, with the axes' ends labelled; no plotting library or script needed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from recipe_engine.files import JsonObject

WIDTH, HEIGHT = 560, 220
PAD_LEFT, PAD_RIGHT, PAD_Y = 56, 12, 18


@dataclass(frozen=True)
class Curve:
    """One metric by step, and its polyline in the view box."""

    name: str
    points: list[tuple[float, float]]  # (step, value)

    @property
    def last(self) -> float | None:
        return self.points[-1][1] if self.points else None

    def bounds(self) -> tuple[float, float, float, float]:
        xs = [x for x, _ in self.points]
        ys = [y for _, y in self.points]
        return min(xs), max(xs), min(ys), max(ys)

    def polyline(self, axes: tuple[float, float, float, float] | None = None) -> str:
        """The `points` attribute of the SVG polyline, on its own axes or on `axes` (x0, x1,
        y0, y1) a chart of several curves shares."""
        if not self.points:
            return ""
        x0, x1, y0, y1 = axes or self.bounds()
        span_x, span_y = (x1 - x0) or 1.0, (y1 - y0) or 1.0
        inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - 2 * PAD_Y
        return " ".join(
            f"{PAD_LEFT + (x - x0) / span_x * inner_w:.1f},"
            f"{PAD_Y + (1 - (y - y0) / span_y) * inner_h:.1f}"
            for x, y in self.points
        )

    def marker(
        self, axes: tuple[float, float, float, float] | None = None
    ) -> tuple[str, str] | None:
        """Where a curve of one point is drawn as a dot (a polyline of one point shows
        nothing): its (x, y) in the view box, on its own axes or on `axes`."""
        if len(self.points) != 1:
            return None
        x, y = self.polyline(axes).split(",")
        return x, y

    def as_json(self) -> JsonObject:
        x0, x1, y0, y1 = self.bounds() if self.points else (0, 0, 0, 0)
        return {"name": self.name, "points": self.polyline(), "steps": [x0, x1], "values": [y0, y1]}


def curve(name: str, records: Sequence[JsonObject], key: str) -> Curve:
    """`key` by step from metrics.jsonl's records (non-finite values left out)."""
    points = [
        (float(r["step"]), float(r[key]))
        for r in records
        if isinstance(r.get(key), int | float) and math.isfinite(r[key])
    ]
    return Curve(name, points)
