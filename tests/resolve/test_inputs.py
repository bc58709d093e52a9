"""What `resolve` records of the training images for the estimate: each distinct size, width
and height (a processor's tokens follow both), remembered as the rows' other lengths are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_kit import sized_pictures

from recipe_engine.config.schema import DataConfig
from recipe_engine.resolve import resolver
from recipe_engine.resolve.inputs import MAX_IMAGE_SIZES, LongestRow, image_sizes


def test_a_survey_records_each_image_size_and_a_second_reads_them_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path / "cache"))
    data = sized_pictures(tmp_path, [(1000, 1000), (2000, 500), (37, 300)], rows=6)
    config = DataConfig(source="local", path=str(data))
    reads: list[str] = []
    load_splits = resolver.rows_data.load_splits

    def counted(*args: object, **kwargs: object) -> object:
        reads.append("rows")
        return load_splits(*args, **kwargs)

    monkeypatch.setattr(resolver.rows_data, "load_splits", counted)
    sizes = ((37, 300), (1000, 1000), (2000, 500))
    assert resolver.survey(config, "vlm", 0, {}).longest.image_sizes == sizes
    [record] = (tmp_path / "cache" / "lengths").glob("*.json")
    assert json.loads(record.read_text())["image_sizes"] == [list(size) for size in sizes]
    assert resolver.survey(config, "vlm", 0, {}).longest.image_sizes == sizes
    assert reads == ["rows"]  # the second survey read no rows


def test_more_sizes_than_kept_keep_the_largest_of_each_aspect_ratio() -> None:
    sizes = [(width, height) for width in range(40, 80) for height in range(40, 80)]
    kept = image_sizes(sizes)
    assert len(sizes) > MAX_IMAGE_SIZES >= len(kept) and list(kept) == sorted(kept)
    assert {(79, 79), (79, 40), (40, 79)} <= set(kept)  # the largest square, widest, tallest
    assert (40, 40) not in kept  # a smaller square


def test_two_rows_sizes_are_both_kept_once() -> None:
    one = LongestRow(images=1, image_sizes=((1000, 1000),))
    two = LongestRow(images=2, image_sizes=((500, 2000), (1000, 1000)))
    both = one.longest(two)
    assert both.image_sizes == ((500, 2000), (1000, 1000)) and both.images == 2
    assert LongestRow.from_json(both.to_json()) == both
