"""Tables the engine prints or writes: aligned plain text and Markdown."""

from __future__ import annotations

from collections.abc import Sequence


def _widths(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[int]:
    """Each column as wide as its widest cell, header included (a table may have no rows)."""
    return [max([len(h), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(header)]


def text_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """Left-aligned columns separated by two spaces, header first; one string per line."""
    widths = _widths(rows, header)
    lines = [header, *rows]
    return ["  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]


def markdown_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """A Markdown table with padded columns, readable as plain text too."""
    widths = _widths(rows, header)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
