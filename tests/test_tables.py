"""The one table renderer: aligned plain-text columns and padded Markdown tables."""

from __future__ import annotations

from recipe_engine.tables import markdown_table, text_table


def test_text_table_aligns_columns_under_their_header():
    lines = text_table([["base", "0.5000"], ["vision", "1.0000"]], header=["model", "exact"])
    assert lines == ["model   exact ", "base    0.5000", "vision  1.0000"]


def test_markdown_table_pads_cells_and_separates_the_header():
    lines = markdown_table([["0", "a long cell"]], header=["job", "overrides"])
    assert lines == ["| job | overrides   |", "|-----|-------------|", "| 0   | a long cell |"]


def test_a_table_without_rows_is_its_header():
    assert text_table([], header=["key", "stage"]) == ["key  stage"]
    assert markdown_table([], header=["key"]) == ["| key |", "|-----|"]
