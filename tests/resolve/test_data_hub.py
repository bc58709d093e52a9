"""recipe_engine.resolve.data_hub: hub datasets (the hub is patched: the suite is offline)."""

from __future__ import annotations

from typing import Any

import pytest
from data_kit import chat, data, sharegpt

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import load_splits


def test_hub_unreachable_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Couldn't reach huggingface.co")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RecipeError) as info:
        load_splits(data(source="hub", path="org/set"), kind="causal_lm")
    msg = str(info.value)
    assert "org/set" in msg and "Hub" in msg and "data.source=local" in msg


def test_hub_rows_stay_arrow_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    hub = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([sharegpt(i) for i in range(3)]),
            "test": datasets.Dataset.from_list([sharegpt(9)]),
        }
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: hub)
    splits = load_splits(data(source="hub", path="org/set"), kind="causal_lm")
    assert isinstance(splits.train, datasets.Dataset) and isinstance(splits.eval, datasets.Dataset)
    assert splits.eval[0]["messages"] == chat(9)["messages"]
