"""Reading local data (files, folders of them, folders `save_to_disk` wrote) into raw splits,
with errors that name the file, the line and the fix (a JSON-lines file is scanned for the line
a reader chokes on).
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.resolve.rows import row_error

if TYPE_CHECKING:
    import datasets

EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
# Tried in this order when `eval_split` is left at its default, matching common hub layouts.
DEFAULT_EVAL_SPLITS = ("eval", "validation", "test")


@dataclass
class Split:
    """One split's raw rows as read; `label` names it in errors ("data file /x/train.jsonl")."""

    label: str
    rows: datasets.Dataset
    base_dir: Path | None  # relative image paths resolve here
    lines: Path | None = None  # a JSON-lines file: errors name its line numbers

    def row_number(self, index: int) -> int:
        """The number errors give the row at `index`: its line in a JSON-lines file (blank
        lines are skipped when reading), else its 1-based position."""
        return index + 1 if self.lines is None else _line_of_record(self.lines, index)


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


def _read_file(path: Path) -> Split:
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        raise RecipeError(
            f"data file {path} has an unsupported extension `{suffix or '(none)'}`. "
            f"Supported: {', '.join(EXTENSIONS)}, a folder of those (train.*, eval.*), "
            "or a folder written by datasets' save_to_disk.",
            key="data.path",
        )
    if suffix != ".parquet":  # Arrow's JSON and CSV readers pass invalid UTF-8 through
        _check_utf8(path)
    try:
        rows = _load_file(BUILDERS[suffix], path)
    except RecipeError:
        raise
    except Exception as exc:  # datasets, pyarrow and pandas raise many types
        raise _why_unloadable(path, suffix, exc) from exc
    json_lines = suffix in (".jsonl", ".json") and not _starts_with(path, b"[")
    if suffix == ".json" and not json_lines and rows.column_names == ["text"]:
        _scan(path, suffix)  # a list of non-objects, which `datasets` reads as `text` rows
    return Split(f"data file {path}", rows, path.parent, path if json_lines else None)


def _check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8 where the first bad byte is (line, byte), read
    in blocks: its rows would otherwise fail one by one, wherever a reader first decodes."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, offset = 1, 0
    try:
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as bad:
                    before = block[: bad.start]
                    line = lines + before.count(b"\n")
                    column = bad.start - (before.rfind(b"\n") + 1) + 1
                    raise _not_utf8(path, line, column, block[bad.start]) from None
                lines, offset = lines + block.count(b"\n"), offset + len(block)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:  # the file ends inside a character
        raise _not_utf8(path, lines, None, None) from None
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _not_utf8(path: Path, line: int, column: int | None, byte: int | None) -> RecipeError:
    where = f"line {line}" + (
        f", byte {column} (0x{byte:02x})" if column and byte is not None else ""
    )
    return RecipeError(
        f"data file {path}, {where}: the file is not UTF-8 text. Re-save it as UTF-8 (e.g. "
        f"`iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}`).",
        key="data.path",
    )


def _load_file(builder: str, path: Path) -> datasets.Dataset:
    """The file as an in-memory Arrow dataset; `datasets`' own cache of it goes with the
    temporary folder, so reading a user's file leaves nothing behind."""
    import datasets

    options: LibraryKwargs = {}  # datasets' builder options
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


def pick_splits(available: Iterable[str], cfg: DataConfig, where: str) -> tuple[str, str | None]:
    """Choose the train and eval split names among `available`."""
    available = list(available)
    train = cfg.train_split
    if train not in available:
        raise RecipeError(
            f"{where} has no `{train}` split.{did_you_mean(train, available)} "
            f"Available: {', '.join(sorted(available)) or '(none)'}. Set data.train_split.",
            key="data.train_split",
        )
    eval_split = cfg.eval_split
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


def _load_saved(path: Path) -> Any:
    """A folder written by `save_to_disk` (a Dataset or a DatasetDict)."""
    import datasets

    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:  # its JSON, Arrow files or layout: datasets raises many types
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise RecipeError(
            f"data folder {path} looks like a dataset saved with save_to_disk, but it cannot "
            f"be read ({type(exc).__name__}: {detail}). Save it again with "
            "Dataset.save_to_disk, or point data.path at its data files.",
            key="data.path",
        ) from None


def read_local(path: Path, cfg: DataConfig) -> tuple[Split, Split | None]:
    if path.is_file():
        return _read_file(path), None
    if (path / "dataset_dict.json").is_file():
        dd = _load_saved(path)
        train, ev = pick_splits(dd.keys(), cfg, f"saved dataset {path}")
        return (
            Split(f"saved dataset {path} (split {train})", dd[train], path),
            Split(f"saved dataset {path} (split {ev})", dd[ev], path) if ev else None,
        )
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        ds = _load_saved(path)
        return Split(f"saved dataset {path}", ds, path), None
    files = _folder_split_files(path)
    if not files:
        raise RecipeError(
            f"data folder {path} holds no data files. Put train.jsonl (or .json, .csv, "
            ".parquet) and optionally eval.* there, or point data.path at a file.",
            key="data.path",
        )
    if cfg.train_split not in files and len(files) == 1:
        # A folder with one data file of any name: that file is the training data.
        return _read_file(next(iter(files.values()))), None
    train, ev = pick_splits(files.keys(), cfg, f"data folder {path}")
    return _read_file(files[train]), (_read_file(files[ev]) if ev else None)
