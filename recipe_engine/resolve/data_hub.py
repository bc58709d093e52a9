"""Hub datasets (`data.source=hub`) into raw splits: `datasets.load_dataset` by name at the
commit `plan` resolved, after one question to the hub that turns its refusals (no such
dataset, no such revision, gated) into one message each."""

from __future__ import annotations

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data_files import Split, pick_splits
from recipe_engine.resolve.hub_models import Where, ask_hub, hub_offline


def read_hub(cfg: DataConfig) -> tuple[Split, Split | None]:
    name = cfg.path
    if not name:
        raise RecipeError("data.path must name the hub dataset (e.g. org/name).", key="data.path")
    import datasets

    at = f" at {cfg.revision[:12]}" if cfg.revision else ""
    # Refusals first. A hub that does not answer leaves it to datasets' cache; where that holds
    # nothing either, `load_dataset` would only retry the hub (23 s) before the same message.
    where = Where("data.path", "`data.path`")
    if not hub_offline() and not ask_hub(str(name), cfg.revision, where, kind="dataset"):
        if not _cached_by_datasets(str(name)):
            raise RecipeError(
                f"could not load hub dataset `{name}`{at}: the hub did not answer from here, "
                "and the local datasets cache does not hold it. A local copy works: set "
                "data.source=local and data.path=<file or folder>.",
                key="data.path",
            )
    try:
        dd = datasets.load_dataset(str(name), revision=cfg.revision)
    except Exception as exc:  # offline and not cached, or the hub failed mid-way
        raise RecipeError(
            f"could not load hub dataset `{name}`{at} ({type(exc).__name__}: {exc}). "
            "The Hugging Face Hub may be unreachable from here (offline, only what the local "
            "cache holds loads). A local copy works: set data.source=local and "
            "data.path=<file or folder>.",
            key="data.path",
        ) from exc
    train, ev = pick_splits(dd.keys(), cfg, f"hub dataset {name}")
    return (
        Split(f"hub dataset {name}{at} (split {train})", dd[train], None),
        Split(f"hub dataset {name}{at} (split {ev})", dd[ev], None) if ev else None,
    )


def _cached_by_datasets(name: str) -> bool:
    """Whether `load_dataset` could fall back to its own cache for `name` (its lookup)."""
    from datasets.load import CachedDatasetModuleFactory

    try:
        CachedDatasetModuleFactory(name).get_module()
    except (FileNotFoundError, OSError, AssertionError):
        return False
    return True
