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

import contextlib
import csv
import dataclasses
import hashlib
import json
import random
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.resolve import formats as data_rows
from recipe_engine.resolve.formats import CANONICAL_COLUMNS, INPUT_FORMATS, row_error
from recipe_engine.resolve.tiny import TINY_DATASETS

if TYPE_CHECKING:
    import datasets

SOURCES = ("local", "hub", "tiny")
FORMATS = ("auto", *INPUT_FORMATS)
KINDS = ("vlm", "causal_lm")
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
# Tried in this order when `eval_split` is left at its default, matching common hub layouts.
DEFAULT_EVAL_SPLITS = ("eval", "validation", "test")
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


@dataclass
class _Split:
    """One split's raw rows as read; `label` names it in errors ("data file /x/train.jsonl")."""

    label: str
    rows: datasets.Dataset
    base_dir: Path | None  # relative image paths resolve here
    lines: Path | None = None  # a JSON-lines file: errors name its line numbers

    def row_number(self, index: int) -> int:
        """The number errors give the row at `index`: its line in a JSON-lines file (blank
        lines are skipped when reading), else its 1-based position."""
        return index + 1 if self.lines is None else _line_of_record(self.lines, index)


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


# --------------------------------------------------------------------------- reading files


def _unreadable(path: Path, exc: BaseException) -> RecipeError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():  # datasets wraps the reader's own error
        detail = str(cause).strip().splitlines()[0]
    return RecipeError(
        f"data file {path}: cannot read it ({type(cause or exc).__name__}: {detail}). "
        "Check the file's permissions and that it is UTF-8 text or valid parquet.",
        key="data.path",
    )


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """No progress bars or logged errors from `datasets`: a bad file is one RecipeError."""
    import datasets
    from datasets.utils import logging as ds_logging
    from datasets.utils.tqdm import are_progress_bars_disabled

    bars_were_off = are_progress_bars_disabled()
    verbosity = ds_logging.get_verbosity()
    datasets.disable_progress_bars()
    ds_logging.set_verbosity(ds_logging.CRITICAL)
    try:
        yield
    finally:
        ds_logging.set_verbosity(verbosity)
        if not bars_were_off:
            datasets.enable_progress_bars()


def _read_file(path: Path) -> _Split:
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        raise RecipeError(
            f"data file {path} has an unsupported extension `{suffix or '(none)'}`. "
            f"Supported: {', '.join(EXTENSIONS)}, a folder of those (train.*, eval.*), "
            "or a folder written by datasets' save_to_disk.",
            key="data.path",
        )
    try:
        rows = _load_file(BUILDERS[suffix], path)
    except RecipeError:
        raise
    except Exception as exc:  # datasets, pyarrow and pandas raise many types
        raise _why_unloadable(path, suffix, exc) from exc
    json_lines = suffix in (".jsonl", ".json") and not _starts_with(path, b"[")
    if suffix == ".json" and not json_lines and rows.column_names == ["text"]:
        _scan(path, suffix)  # a list of non-objects, which `datasets` reads as `text` rows
    return _Split(f"data file {path}", rows, path.parent, path if json_lines else None)


def _load_file(builder: str, path: Path) -> datasets.Dataset:
    """The file as an in-memory Arrow dataset; `datasets`' own cache of it goes with the
    temporary folder, so reading a user's file leaves nothing behind."""
    import datasets

    options: dict[str, Any] = {}
    if builder == "csv":
        # Every cell as text, as written (pandas would make `2` an int and `` a NaN).
        header = _csv_header(path)
        options = {
            "features": datasets.Features({name: datasets.Value("string") for name in header}),
            "na_filter": False,
            "encoding": "utf-8-sig",
        }
    with tempfile.TemporaryDirectory(prefix="recipe-engine-data-") as cache:
        return datasets.load_dataset(
            builder,
            data_files=str(path),
            split="train",
            cache_dir=cache,
            keep_in_memory=True,
            **options,
        )


def _csv_header(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise _unreadable(path, exc) from exc


def _starts_with(path: Path, prefix: bytes) -> bool:
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(prefix)


def _why_unloadable(path: Path, suffix: str, exc: BaseException) -> RecipeError:
    """The row that stopped `load_dataset`, found by the engine's own scanner; else why the
    file as a whole could not be read."""
    if suffix == ".parquet":
        return _unreadable(path, exc)
    if not _scan(path, suffix):
        return RecipeError(f"data file {path} has no rows. Add data.", key="data.path")
    return _unreadable(path, exc)


def _scan(path: Path, suffix: str) -> int:
    """Read a JSON or CSV file line by line, raising the first bad row's error; returns the
    number of rows when every one is well-formed."""
    text = _read_text(path)
    if suffix == ".csv":
        return _scan_csv(path, text)
    if text.lstrip().startswith("["):
        return _scan_json_list(path, text)
    return _scan_json_lines(path, text)


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: tolerate the BOM some editors/Excel write.
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc


def _scan_json_lines(path: Path, text: str) -> int:
    label, rows = f"data file {path}", 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise row_error(
                label,
                lineno,
                f"invalid JSON ({exc.msg} at column {exc.colno})",
                "Each line must be one JSON object; fix or remove the line.",
            ) from exc
        if not isinstance(record, dict):
            raise row_error(
                label,
                lineno,
                f"expected a JSON object, got {type(record).__name__}",
                'Each line must be one JSON object like {"messages": [...]}.',
            )
        rows += 1
    return rows


def _scan_json_list(path: Path, text: str) -> int:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecipeError(
            f"data file {path}, line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})."
            " A .json file must hold a list of objects or one object per line.",
            key="data.path",
        ) from exc
    for i, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise row_error(
                f"data file {path}",
                i,
                f"expected a JSON object, got {type(record).__name__}",
                "The list must contain one object per row.",
            )
    return len(data)


def _scan_csv(path: Path, text: str) -> int:
    rows = 0
    try:
        for i, record in enumerate(csv.DictReader(text.splitlines()), start=1):
            if None in record:  # DictReader files surplus cells under the key None
                raise row_error(
                    f"data file {path}",
                    i,
                    "the row has more cells than the header",
                    "Quote cells that contain commas, or fix the row.",
                )
            rows += 1
    except csv.Error as exc:
        raise _unreadable(path, exc) from exc
    return rows


def _line_of_record(path: Path, index: int) -> int:
    """The line number of the `index`-th (0-based) record of a JSON-lines file."""
    records = -1
    with path.open(encoding="utf-8-sig") as handle:
        for lineno, line in enumerate(handle, start=1):
            records += bool(line.strip())
            if records == index:
                return lineno
    return index + 1


def _pick_splits(
    available: Iterable[str], cfg: Mapping[str, Any], where: str
) -> tuple[str, str | None]:
    """Choose the train and eval split names among `available`."""
    available = list(available)
    train = cfg.get("train_split") or "train"
    if train not in available:
        raise RecipeError(
            f"{where} has no `{train}` split.{did_you_mean(train, available)} "
            f"Available: {', '.join(sorted(available)) or '(none)'}. Set data.train_split.",
            key="data.train_split",
        )
    eval_split = cfg.get("eval_split", "eval")
    if eval_split is None:
        return train, None
    candidates = DEFAULT_EVAL_SPLITS if eval_split == "eval" else (eval_split,)
    for name in candidates:
        if name in available and name != train:
            return train, name
    if eval_split != "eval":
        raise RecipeError(
            f"{where} has no `{eval_split}` split.{did_you_mean(eval_split, available)} "
            f"Available: {', '.join(sorted(available))}. Set data.eval_split (or null).",
            key="data.eval_split",
        )
    return train, None


def _folder_split_files(folder: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix.lower() in EXTENSIONS and not path.name.startswith("."):
            if path.stem in files:
                raise RecipeError(
                    f"data folder {folder} has two files for split `{path.stem}` "
                    f"({files[path.stem].name}, {path.name}). Keep one.",
                    key="data.path",
                )
            files[path.stem] = path
    return files


def _read_local(path: Path, cfg: Mapping[str, Any]) -> tuple[_Split, _Split | None]:
    if path.is_file():
        return _read_file(path), None
    if (path / "dataset_dict.json").is_file():
        import datasets

        dd = datasets.load_from_disk(str(path))
        train, ev = _pick_splits(dd.keys(), cfg, f"saved dataset {path}")
        return (
            _Split(f"saved dataset {path} (split {train})", dd[train], path),
            _Split(f"saved dataset {path} (split {ev})", dd[ev], path) if ev else None,
        )
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        import datasets

        ds = datasets.load_from_disk(str(path))
        return _Split(f"saved dataset {path}", ds, path), None
    files = _folder_split_files(path)
    if not files:
        raise RecipeError(
            f"data folder {path} holds no data files. Put train.jsonl (or .json, .csv, "
            ".parquet) and optionally eval.* there, or point data.path at a file.",
            key="data.path",
        )
    train_name = cfg.get("train_split") or "train"
    if train_name not in files and len(files) == 1:
        # A folder with one data file of any name: that file is the training data.
        return _read_file(next(iter(files.values()))), None
    train, ev = _pick_splits(files.keys(), cfg, f"data folder {path}")
    return _read_file(files[train]), (_read_file(files[ev]) if ev else None)


def _read_hub(cfg: Mapping[str, Any]) -> tuple[_Split, _Split | None]:
    name = cfg.get("path")
    if not name:
        raise RecipeError("data.path must name the hub dataset (e.g. org/name).", key="data.path")
    import datasets

    try:
        dd = datasets.load_dataset(str(name), name=cfg.get("subset"), revision=cfg.get("revision"))
    except Exception as exc:  # offline, missing repo, bad revision: all the same fix for users
        raise RecipeError(
            f"could not load hub dataset `{name}` ({type(exc).__name__}: {exc}). "
            "The Hugging Face Hub may be unreachable from here, or the name/revision is wrong. "
            "A local copy works: set data.source=local and data.path=<file or folder>.",
            key="data.path",
        ) from exc
    train, ev = _pick_splits(dd.keys(), cfg, f"hub dataset {name}")
    return (
        _Split(f"hub dataset {name} (split {train})", dd[train], None),
        _Split(f"hub dataset {name} (split {ev})", dd[ev], None) if ev else None,
    )


# --------------------------------------------------------------------------- conversion


def _convert(split: _Split, layout: data_rows.Layout) -> datasets.Dataset:
    """Every row checked and converted by `Dataset.map`, kept in memory as Arrow."""
    rows = _undecoded_images(split.rows)
    converter = data_rows.RowConverter(layout, split.label, split.base_dir, split.row_number)
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


def _check_not_empty(train: _Split, ev: _Split | None) -> None:
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
            train_split, eval_split = _read_hub(cfg)
        else:
            train_split, eval_split = _read_local(resolve_path(cfg), cfg)
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
