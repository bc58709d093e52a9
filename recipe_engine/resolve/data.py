"""Load a stage's data into the row formats TRL's SFTTrainer accepts, validating every row.

Files are read with `datasets.load_dataset` (its `json`, `csv` and `parquet` builders), folders
written by `save_to_disk` with `load_from_disk`, hub datasets with `load_dataset`: every split
stays an Arrow dataset, and `Dataset.map` converts and checks each row (`data_rows`: the
formats, their detection and the row-numbered errors). Where a file does not load, the line
scanners below find the row to name, on that failure path only.

``datasets``, ``torch``, ``pyarrow`` and ``PIL`` are imported lazily: the planner imports this
module for `data_identity` only and must stay light.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.resolve import formats as data_rows
from recipe_engine.resolve.data_files import Split, quietly, read_hub, read_local
from recipe_engine.resolve.formats import CANONICAL_COLUMNS, INPUT_FORMATS
from recipe_engine.resolve.rows import RowConverter
from recipe_engine.resolve.tiny import TINY_DATASETS

if TYPE_CHECKING:
    import datasets

SOURCES = ("local", "hub", "tiny")
FORMATS = ("auto", *INPUT_FORMATS)
KINDS = ("vlm", "causal_lm")
# `data.chat_template`: whether plain prompt/completion rows go through the model's chat
# template (as one user and one assistant turn). The planner resolves `auto` by the tokenizer:
# rows it reads with `true` are converted, with `auto` or `false` kept as plain text.
CHAT_TEMPLATE_SETTINGS = ("auto", "true", "false")


@dataclass
class DataSplits:
    """Train/eval datasets in TRL row format, plus the identity hash and the output row format."""

    train: datasets.Dataset
    eval: datasets.Dataset | None
    identity: str
    format: str  # data_rows.OUTPUT_FORMATS: messages | prompt_completion | vlm | vlm_prompt_...
    source_format: str = ""  # what the rows were: messages, sharegpt, alpaca, ... (+ images)


# --------------------------------------------------------------------------- config helpers


def _plain(value: Any) -> Any:
    """OmegaConf containers -> plain dicts/lists so they hash and compare like literals."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _mapping(cfg: DataConfig | Mapping[str, Any]) -> Mapping[str, Any]:
    """The reader works on the keys of `DataConfig`; a plain mapping (e.g. from an older
    manifest) works too."""
    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg


def _source(cfg: Mapping[str, Any]) -> str:
    source = cfg.get("source") or "local"
    if source not in SOURCES:
        raise RecipeError(
            f"data.source `{source}` is not supported.{did_you_mean(str(source), SOURCES)} "
            f"Use one of: {', '.join(SOURCES)}.",
            key="data.source",
        )
    return source


def _format(cfg: Mapping[str, Any]) -> str:
    fmt = cfg.get("format") or "auto"
    if fmt not in FORMATS:
        raise RecipeError(
            f"data.format `{fmt}` is not supported.{did_you_mean(str(fmt), FORMATS)} "
            f"Use one of: {', '.join(FORMATS)}.",
            key="data.format",
        )
    if fmt == "auto" and _source(cfg) == "tiny":  # known without reading a row
        return TINY_DATASETS.get(_tiny_name(cfg), fmt)
    return fmt


def _columns(cfg: Mapping[str, Any]) -> dict[str, str]:
    columns = _plain(cfg.get("columns") or {})
    if not isinstance(columns, dict):
        raise RecipeError(
            "data.columns must map canonical names to your column names, "
            "e.g. data.columns.messages=conversation.",
            key="data.columns",
        )
    for canon, name in columns.items():
        if canon not in CANONICAL_COLUMNS:
            raise RecipeError(
                f"data.columns.{canon} is not a known column."
                f"{did_you_mean(canon, CANONICAL_COLUMNS)} Known: {', '.join(CANONICAL_COLUMNS)}.",
                key=f"data.columns.{canon}",
            )
        if not isinstance(name, str) or not name:
            raise RecipeError(
                f"data.columns.{canon} must be a column name (a string), got {name!r}.",
                key=f"data.columns.{canon}",
            )
    return columns


def _eval_fraction(cfg: Mapping[str, Any]) -> float:
    fraction = cfg.get("eval_fraction") or 0.0
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not (0.0 <= fraction < 1.0)
    ):
        raise RecipeError(
            f"data.eval_fraction must be a number in [0, 1), got {fraction!r}.",
            key="data.eval_fraction",
        )
    return float(fraction)


def _max_samples(cfg: Mapping[str, Any]) -> int | None:
    value = cfg.get("max_samples")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecipeError(
            f"data.max_samples must be a positive integer or null, got {value!r}.",
            key="data.max_samples",
        )
    return value


def chat_template_setting(cfg: DataConfig | Mapping[str, Any]) -> str:
    """`data.chat_template` as auto | true | false (the command line's true arrives as "True")."""
    value = _mapping(cfg).get("chat_template")
    text = "auto" if value is None else str(value).strip().lower()
    if text not in CHAT_TEMPLATE_SETTINGS:
        raise RecipeError(
            f"data.chat_template `{value}` is not one of {', '.join(CHAT_TEMPLATE_SETTINGS)}. "
            "auto: plain prompt/completion rows go through the chat template when the model's "
            "tokenizer has one; true: always (the model must have one); false: plain text.",
            key="data.chat_template",
        )
    return text


def _tiny_name(cfg: Mapping[str, Any]) -> str:
    # The brief puts the tiny dataset's name in `path`; fall back to `name` for convenience.
    name = cfg.get("path") or cfg.get("name")
    if not name:
        raise RecipeError(
            "data.path must name the tiny dataset when data.source=tiny.", key="data.path"
        )
    if name not in TINY_DATASETS:
        raise RecipeError(
            f"data.path `{name}` is not a built-in dataset (data.source is tiny)."
            f"{did_you_mean(str(name), TINY_DATASETS)} Built-in: {', '.join(TINY_DATASETS)}. "
            "For your own file or folder also set data.source=local "
            "(stage.<name>.data.source=local when only one stage reads it).",
            key="data.path",
        )
    return str(name)


def resolve_path(cfg: Mapping[str, Any]) -> Path:
    """The local file or folder the data lives in (builds the tiny dataset if needed)."""
    source = _source(cfg)
    if source == "tiny":
        from recipe_engine.resolve import tiny

        return Path(tiny.build_dataset(_tiny_name(cfg)))
    if source == "hub":
        raise RecipeError(
            "data.source=hub has no local path; use data.source=local for files.",
            key="data.source",
        )
    raw = cfg.get("path")
    if not raw:
        raise RecipeError(
            "data.path is not set; point it at a data file (.jsonl, .json, .csv, .parquet) "
            "or a folder.",
            key="data.path",
        )
    path = Path(str(raw)).expanduser().resolve()
    if not path.exists():
        raise RecipeError(
            f"data.path `{raw}` does not exist (resolved to {path}). "
            "Fix data.path or create the file.",
            key="data.path",
        )
    return path


# --------------------------------------------------------------------------- identity


def _hash_file(h: Any, path: Path) -> None:
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def _hash_tree(h: Any, root: Path) -> None:
    if root.is_file():
        h.update(b"file\0")
        _hash_file(h, root)
        return
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        # Hidden files (.DS_Store, editor swap files) don't change the data.
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(rel.as_posix().encode() + b"\0")
        _hash_file(h, path)
        h.update(b"\0")


def data_identity(cfg: DataConfig | Mapping[str, Any]) -> str:
    """sha256 over the settings that decide the rows plus the bytes of local data files.

    Pure: touches only the filesystem, never imports datasets/torch (the planner uses it).
    The eval_fraction split also depends on `load_splits`' seed, which callers hash separately.
    """
    cfg = _mapping(cfg)
    source = _source(cfg)
    eval_split = cfg.get("eval_split", "eval")
    settings = {
        "source": source,
        "path": str(cfg.get("path")),
        "format": _format(cfg),
        "columns": dict(sorted(_columns(cfg).items())),
        "train_split": cfg.get("train_split") or "train",
        "eval_split": eval_split,
        "eval_fraction": _eval_fraction(cfg),
        "max_samples": _max_samples(cfg),
    }
    if chat_template_setting(cfg) == "true":  # only then are rows converted: other keys stay
        settings["chat_template"] = True
    if source == "hub":
        settings["revision"] = cfg.get("revision")
        settings["subset"] = cfg.get("subset")
    if source == "tiny":
        settings["path"] = _tiny_name(cfg)
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    if source in ("local", "tiny"):  # a built-in dataset by the rows it was built to
        _hash_tree(h, resolve_path(cfg))
    return h.hexdigest()


# --------------------------------------------------------------------------- conversion


def _convert(split: Split, layout: data_rows.Layout) -> datasets.Dataset:
    """Every row checked and converted by `Dataset.map`, kept in memory as Arrow."""
    rows = _undecoded_images(split.rows)
    converter = RowConverter(layout, split.label, split.base_dir, split.row_number)
    fingerprint = hashlib.sha256(f"{rows._fingerprint}{layout}".encode()).hexdigest()[:32]
    return rows.map(
        converter,
        with_indices=True,
        remove_columns=rows.column_names,
        features=data_rows.features(layout.output),
        keep_in_memory=True,
        load_from_cache_file=False,
        new_fingerprint=fingerprint,  # the converter is not hashed: it is the same code
    )


def _undecoded_images(ds: datasets.Dataset) -> datasets.Dataset:
    """Image columns as {bytes, path}: validation then reads no pixels (they are decoded,
    as RGB, when TRL reads a row)."""
    import datasets

    for name, feature in ds.features.items():
        if isinstance(feature, datasets.Image):
            ds = ds.cast_column(name, datasets.Image(decode=False))
        elif isinstance(feature, datasets.List) and isinstance(feature.feature, datasets.Image):
            ds = ds.cast_column(name, datasets.List(datasets.Image(decode=False)))
    return ds


def _fraction_split(
    rows: datasets.Dataset, fraction: float, seed: int, label: str
) -> tuple[datasets.Dataset, datasets.Dataset]:
    n = len(rows)
    n_eval = max(1, round(n * fraction))
    if n - n_eval < 1:
        raise RecipeError(
            f"{label} has {n} row(s): too few to split off eval_fraction={fraction}. "
            "Add rows, provide an eval file, or set data.eval_fraction=0.",
            key="data.eval_fraction",
        )
    order = list(range(n))
    random.Random(seed).shuffle(order)
    eval_idx = set(order[:n_eval])
    # Keep the file's order within each part so `max_samples` takes the first rows.
    train = [i for i in range(n) if i not in eval_idx]
    return rows.select(train), rows.select(sorted(eval_idx))


def _check_not_empty(train: Split, ev: Split | None) -> None:
    if not len(train.rows):
        raise RecipeError(f"{train.label} has no rows. Add data.", key="data.path")
    if ev is not None and not len(ev.rows):
        raise RecipeError(
            f"{ev.label} has no rows. Add rows or delete the eval file.", key="data.path"
        )


def load_splits(cfg: DataConfig | Mapping[str, Any], *, kind: str, seed: int = 0) -> DataSplits:
    """Read, validate (every row) and convert the data into TRL-ready train/eval datasets.

    `kind` is the stage's model kind: "vlm" accepts any format, "causal_lm" rejects rows
    with images.
    """
    cfg = _mapping(cfg)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    source, fmt, columns = _source(cfg), _format(cfg), _columns(cfg)
    fraction, max_samples = _eval_fraction(cfg), _max_samples(cfg)
    identity = data_identity(cfg)

    with quietly():
        if source == "hub":
            train_split, eval_split = read_hub(cfg)
        else:
            train_split, eval_split = read_local(resolve_path(cfg), cfg)
        _check_not_empty(train_split, eval_split)
        layout = data_rows.resolve_layout(
            fmt, data_rows.survey(train_split.rows, train_split.label), columns
        )
        layout = dataclasses.replace(layout, chat=chat_template_setting(cfg) == "true")
        if layout.images and kind == "causal_lm":
            raise RecipeError(
                f"{train_split.label} holds vision-language rows (images / image parts) but "
                "this stage trains a text-only model. Use a vision-language model or a text "
                "dataset.",
                key="data.format",
            )
        train = _convert(train_split, layout)
        held_out = _convert(eval_split, layout) if eval_split else None
    if held_out is None and fraction > 0:
        train, held_out = _fraction_split(train, fraction, seed, train_split.label)
    if max_samples is not None and len(train) > max_samples:
        train = train.select(range(max_samples))
    return DataSplits(train, held_out, identity, layout.output, layout.describe())
