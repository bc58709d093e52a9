"""Load a stage's data into the row shapes TRL's SFTTrainer accepts, validating every row.

Files are read with `datasets.load_dataset` (its `json`, `csv` and `parquet` builders), folders
written by `save_to_disk` with `load_from_disk` (`data_files`), hub datasets with
`load_dataset` (`data_hub`): every split stays an Arrow dataset, and `Dataset.map` converts and
checks each row (`rows`, through the format registry: `formats`, detected by `detection`).

Data without a held-out split of its own has rows held out of its training split after
conversion (`held_out`: automatically, or by `data.eval_fraction`).

Public: `load_splits(cfg, *, kind, seed) -> DataSplits`, `data_identity(cfg)`,
`chat_template_setting(cfg)`, `resolve_path(cfg)`, `quietly()`, `data_config(record)`; every
one takes a `DataConfig`, whose values are checked once (`check_data`).

``datasets``, ``torch``, ``pyarrow`` and ``PIL`` are imported lazily: the planner imports this
module for `data_identity` only and must stay light.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_engine.config.bounds import FRACTION, POSITIVE_INT, is_number
from recipe_engine.config.choices import DataSource, ModelKind, values
from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import JsonObject
from recipe_engine.resolve import formats
from recipe_engine.resolve.data_files import Split, quietly, read_local
from recipe_engine.resolve.data_hub import read_hub
from recipe_engine.resolve.detection import Layout, resolve_layout
from recipe_engine.resolve.formats import canonical_columns, input_formats
from recipe_engine.resolve.held_out import HeldOut, rows_identity, split_off
from recipe_engine.resolve.rows import RowConverter
from recipe_engine.resolve.survey import survey
from recipe_engine.resolve.tiny import TINY_DATASETS

if TYPE_CHECKING:
    import datasets

__all__ = [
    "DataSplits",
    "check_data",
    "chat_template_setting",
    "data_config",
    "data_identity",
    "load_splits",
    "quietly",
    "resolve_path",
]

SOURCES = values(DataSource)  # a stage's `data` is an open section: checked here
# How a user's rows are read, versioned: bump it when the same file would become other TRL rows
# (its stage keys then name other weights). 2: a `system` column, Alpaca's `history` and
# `<image>` marks in role/content turns are read (they were ignored), text parts are joined.
# 3: Qwen-VL's `<img>PATH</img>` tags are images (they were words: `peer_formats.qwen_vl`).
READER = 3
KINDS = values(ModelKind)
# `data.chat_template`: whether plain prompt/completion rows (and plain-text preference pairs)
# go through the model's chat template (as one user and one assistant turn). The planner
# resolves `auto` by the tokenizer: rows it reads with `true` are converted, with `auto` or
# `false` kept as plain text. Conversations, preference pairs included, are read as they are.
CHAT_TEMPLATE_SETTINGS = ("auto", "true", "false")


@dataclass
class DataSplits:
    """Train/eval datasets in TRL row format, plus the identity hash (of the training rows:
    `held_out.rows_identity`), the output row format and how the eval rows were obtained."""

    train: datasets.Dataset
    eval: datasets.Dataset | None
    identity: str
    format: str  # formats.OUTPUT_FORMATS: messages | prompt_completion | ... | vlm_preference
    source_format: str = ""  # what the rows were: messages, sharegpt, alpaca, ... (+ images)
    held_out: HeldOut = HeldOut.SPLIT


# --------------------------------------------------------------------------- settings


def data_config(record: Mapping[str, Any]) -> DataConfig:
    """The `DataConfig` a manifest recorded (`asdict`); keys it no longer has are dropped."""
    known = {f.name for f in dataclasses.fields(DataConfig)}
    return DataConfig(**{key: value for key, value in record.items() if key in known})


def check_data(cfg: DataConfig) -> DataConfig:
    """`cfg` with every value checked once against what it may be (errors name the key),
    unset values as their defaults and a built-in dataset's `auto` format as its own; what
    the functions below read."""
    if not isinstance(cfg, DataConfig):
        raise TypeError(f"data settings must be a DataConfig, got {type(cfg).__name__}")
    source = _source(cfg.source)
    path = _tiny_name(cfg) if source == "tiny" else cfg.path
    fmt = _format(cfg.format)
    if cfg.revision is not None and source != "hub":
        raise RecipeError(
            f"data.revision is {cfg.revision!r}, but data.source is {source}: a revision is a "
            "hub dataset's. Drop data.revision, or set data.source=hub.",
            key="data.revision",
        )
    if fmt == "auto" and source == "tiny":  # known without reading a row
        fmt = TINY_DATASETS.get(path, fmt)
    return dataclasses.replace(
        cfg,
        source=source,
        path=path,
        format=fmt,
        columns=_columns(cfg.columns),
        train_split=cfg.train_split or "train",
        eval_fraction=_eval_fraction(cfg.eval_fraction),
        max_samples=_max_samples(cfg.max_samples),
        chat_template=chat_template_setting(cfg),
    )


def _source(value: Any) -> str:
    source = value or "local"
    if source not in SOURCES:
        raise RecipeError(
            f"data.source `{source}` is not supported.{did_you_mean(str(source), SOURCES)} "
            f"Use one of: {', '.join(SOURCES)}.",
            key="data.source",
        )
    return source


def _format(value: Any) -> str:
    fmt = value or "auto"
    settings = ("auto", *input_formats())
    if fmt not in settings:
        raise RecipeError(
            f"data.format `{fmt}` is not supported.{did_you_mean(str(fmt), settings)} "
            f"Use one of: {', '.join(settings)}.",
            key="data.format",
        )
    return fmt


def _columns(value: Any) -> dict[str, str]:
    columns = value or {}
    if not isinstance(columns, Mapping):
        raise RecipeError(
            "data.columns must map canonical names to your column names, "
            "e.g. data.columns.messages=conversation.",
            key="data.columns",
        )
    for canon, name in columns.items():
        known = canonical_columns()
        if canon not in known:
            raise RecipeError(
                f"data.columns.{canon} is not a known column."
                f"{did_you_mean(canon, known)} Known: {', '.join(known)}.",
                key=f"data.columns.{canon}",
            )
        if not isinstance(name, str) or not name:
            raise RecipeError(
                f"data.columns.{canon} must be a column name (a string), got {name!r}.",
                key=f"data.columns.{canon}",
            )
    return {str(canon): name for canon, name in columns.items()}


def _eval_fraction(value: Any) -> float | None:
    """null (automatic: `held_out`) or a fraction in [0, 1)."""
    if value is None:
        return None
    if not (is_number(value) and math.isfinite(value) and FRACTION.holds(value)):
        raise RecipeError(
            f"data.eval_fraction must be null (hold out rows automatically) or a number in "
            f"[0, 1) (0: train on every row), got {value!r}.",
            key="data.eval_fraction",
        )
    return float(value)


def _max_samples(value: Any) -> int | None:
    if value is None:
        return None
    if not (is_number(value) and isinstance(value, int) and POSITIVE_INT.holds(value)):
        raise RecipeError(
            f"data.max_samples must be a positive integer or null, got {value!r}.",
            key="data.max_samples",
        )
    return value


def chat_template_setting(cfg: DataConfig) -> str:
    """`data.chat_template` as auto | true | false (the command line's true arrives as "True")."""
    value = cfg.chat_template
    text = "auto" if value is None else str(value).strip().lower()
    if text not in CHAT_TEMPLATE_SETTINGS:
        raise RecipeError(
            f"data.chat_template `{value}` is not one of {', '.join(CHAT_TEMPLATE_SETTINGS)}. "
            "auto: plain prompt/completion rows go through the chat template when the model's "
            "tokenizer has one; true: always (the model must have one); false: plain text.",
            key="data.chat_template",
        )
    return text


def _tiny_name(cfg: DataConfig) -> str:
    # The brief puts the tiny dataset's name in `path`; fall back to `name` for convenience.
    name = cfg.path or cfg.name
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


def resolve_path(cfg: DataConfig) -> Path:
    """The local file or folder the data lives in (builds the tiny dataset if needed)."""
    return _local_path(check_data(cfg))


def _local_path(cfg: DataConfig) -> Path:
    if cfg.source == "tiny":
        from recipe_engine.resolve import tiny

        return Path(tiny.build_dataset(cfg.path))
    if cfg.source == "hub":
        raise RecipeError(
            "data.source=hub has no local path; use data.source=local for files.",
            key="data.source",
        )
    raw = cfg.path
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


def data_identity(cfg: DataConfig) -> str:
    """sha256 over the settings that decide the rows plus the bytes of local data files.

    Pure: touches only the filesystem, never imports datasets/torch (the planner uses it).
    The eval_fraction split also depends on `load_splits`' seed, which callers hash separately;
    the automatic hold-out is told by the rows (`held_out.rows_identity` adds it).
    """
    return _identity(check_data(cfg))


def _identity(cfg: DataConfig) -> str:
    settings: JsonObject = {  # hashed into the data's identity
        "source": cfg.source,
        "path": str(cfg.path),
        "format": cfg.format,
        "columns": dict(sorted(cfg.columns.items())),
        "train_split": cfg.train_split,
        "eval_split": cfg.eval_split,
        # Automatic as 0: what it holds out is hashed once known (`held_out.rows_identity`),
        # so data with its own held-out split keeps the identity it had before `auto`.
        "eval_fraction": cfg.eval_fraction or 0.0,
        "max_samples": cfg.max_samples,
    }
    if cfg.chat_template == "true":  # only then are rows converted: other keys stay
        settings["chat_template"] = True
    if cfg.source != "tiny":  # the built-in rows read as they always did (a test pins them)
        settings["reader"] = READER
    if cfg.source == "hub":  # the commit `plan` resolved (data.revision), as models are keyed
        settings["revision"], settings["subset"] = cfg.revision, None
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    if cfg.source in ("local", "tiny"):  # a built-in dataset by the rows it was built to
        _hash_tree(h, _local_path(cfg))
    return h.hexdigest()


def _content_digest(cfg: DataConfig) -> str:
    """What the automatic hold-out draws with: the bytes of local and built-in data, a hub
    dataset's id at its resolved commit; never a setting that leaves the rows as they are."""
    h = hashlib.sha256()
    if cfg.source == "hub":
        h.update(f"{cfg.path}@{cfg.revision}".encode())
    else:
        _hash_tree(h, _local_path(cfg))
    return h.hexdigest()


# --------------------------------------------------------------------------- conversion


def _convert(split: Split, layout: Layout) -> datasets.Dataset:
    """Every row checked and converted by `Dataset.map`, kept in memory as Arrow."""
    rows = _undecoded_images(split.rows)
    converter = RowConverter(layout, split.label, split.base_dir, split.row_number)
    fingerprint = hashlib.sha256(f"{rows._fingerprint}{layout}".encode()).hexdigest()[:32]
    features = formats.features(layout.output)
    for name, column in layout.passed:  # as the split has them: the rewards read them so
        features[name] = rows.features[column]
    return rows.map(
        converter,
        with_indices=True,
        remove_columns=rows.column_names,
        features=features,
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


def _check_not_empty(train: Split, ev: Split | None) -> None:
    if not len(train.rows):
        raise RecipeError(f"{train.label} has no rows. Add data.", key="data.path")
    if ev is not None and not len(ev.rows):
        raise RecipeError(
            f"{ev.label} has no rows. Add rows or delete the eval file.", key="data.path"
        )


def load_splits(cfg: DataConfig, *, kind: str, seed: int = 0) -> DataSplits:
    """Read, validate (every row) and convert the data into TRL-ready train/eval datasets.

    `kind` is the stage's model kind: "vlm" accepts any format, "causal_lm" rejects rows
    with images.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    cfg = check_data(cfg)
    with quietly():
        train_split, eval_split = _read(cfg)
        _check_not_empty(train_split, eval_split)
        layout = _layout(cfg, train_split, kind)
        train = _convert(train_split, layout)
        held_out = _convert(eval_split, layout) if eval_split else None
    how = HeldOut.SPLIT
    if held_out is None:
        content = functools.partial(_content_digest, cfg)
        train, held_out, how = split_off(
            train, train_split.label, cfg.eval_fraction, seed=seed, content=content
        )
    if cfg.max_samples is not None and len(train) > cfg.max_samples:
        train = train.select(range(cfg.max_samples))
    identity = rows_identity(_identity(cfg), how)
    return DataSplits(train, held_out, identity, layout.output, layout.describe(), how)


def _read(cfg: DataConfig) -> tuple[Split, Split | None]:
    if cfg.source == "hub":
        return read_hub(cfg)
    return read_local(_local_path(cfg), cfg)


def _layout(cfg: DataConfig, train: Split, kind: str) -> Layout:
    """How the rows are read: `data.format` (or what the train split's columns say) and
    `data.columns`; rows with images only for a vision-language model."""
    layout = resolve_layout(cfg.format, survey(train.rows, train.label), cfg.columns)
    layout = dataclasses.replace(layout, chat=cfg.chat_template == "true")
    if layout.images and kind == "causal_lm":
        raise RecipeError(
            f"{train.label} holds vision-language rows (images, image parts or `<img>` tags) "
            "but this stage trains a text-only model. Use a vision-language model or a text "
            "dataset.",
            key="data.format",
        )
    return layout
