"""Hub datasets (`data.source=hub`) into raw splits: `datasets.load_dataset` by name, with one
error that says what to do when the hub cannot be reached."""

from __future__ import annotations

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data_files import Split, pick_splits


def read_hub(cfg: DataConfig) -> tuple[Split, Split | None]:
    name = cfg.path
    if not name:
        raise RecipeError("data.path must name the hub dataset (e.g. org/name).", key="data.path")
    import datasets

    try:
        dd = datasets.load_dataset(str(name))
    except Exception as exc:  # offline, missing repo, bad revision: all the same fix for users
        raise RecipeError(
            f"could not load hub dataset `{name}` ({type(exc).__name__}: {exc}). "
            "The Hugging Face Hub may be unreachable from here, or the name/revision is wrong. "
            "A local copy works: set data.source=local and data.path=<file or folder>.",
            key="data.path",
        ) from exc
    train, ev = pick_splits(dd.keys(), cfg, f"hub dataset {name}")
    return (
        Split(f"hub dataset {name} (split {train})", dd[train], None),
        Split(f"hub dataset {name} (split {ev})", dd[ev], None) if ev else None,
    )
