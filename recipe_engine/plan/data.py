"""Load a stage's data into the row formats TRL's SFTTrainer accepts, validating every row.

Output rows (one of three shapes, reported as ``DataSplits.format``):

- ``messages``: ``{"messages": [{"role": ..., "content": str}, ...]}`` (Alpaca rows end up here)
- ``prompt_completion``: ``{"prompt": str, "completion": str}``
- ``vlm``: ``{"images": [PIL.Image (RGB)], "messages": [{"role": ..., "content": [parts]}]}``
  where a part is ``{"type": "image", "text": None}`` or ``{"type": "text", "text": str}``

``datasets``, ``torch``, ``pyarrow`` and ``PIL`` are imported lazily: the planner imports this
module for `data_identity` only and must stay light.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib.util
import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.tiny import TINY_DATASETS

if TYPE_CHECKING:
    import datasets

SOURCES = ("local", "hub", "tiny")
FORMATS = ("auto", "messages", "prompt_completion", "alpaca", "vlm")
KINDS = ("vlm", "causal_lm")
CANONICAL_COLUMNS = ("messages", "prompt", "completion", "instruction", "input", "output", "images")
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
ROLES = ("system", "user", "assistant")
# Tried in this order when `eval_split` is left at its default, matching common hub layouts.
DEFAULT_EVAL_SPLITS = ("eval", "validation", "test")

_COLUMNS_FIX = "Map your column with data.columns.{canon}=<name> or fix the row."


@dataclass
class DataSplits:
    """Train/eval datasets in TRL row format, plus the identity hash and the output row format."""

    train: datasets.Dataset
    eval: datasets.Dataset | None
    identity: str
    format: str  # messages | prompt_completion | vlm


@dataclass
class _Split:
    """Raw records of one split; `label` names it in errors ("data file /x/train.jsonl")."""

    label: str
    records: list[tuple[int, dict[str, Any]]]  # (1-based row or line number, record)
    base_dir: Path | None  # relative image paths resolve here


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
        from recipe_engine.tiny import build_dataset

        return Path(build_dataset(_tiny_name(cfg)))
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
    if source == "hub":
        settings["revision"] = cfg.get("revision")
        settings["subset"] = cfg.get("subset")
    if source == "tiny":
        settings["path"] = _tiny_name(cfg)
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    if source == "local":
        _hash_tree(h, resolve_path(cfg))
    elif source == "tiny":
        # Tiny datasets are a pure function of (name, builder code); hashing the builder's
        # source stands in for a version without building or importing anything heavy.
        try:
            spec = importlib.util.find_spec("recipe_engine.tiny")
        except (ImportError, ValueError):  # ValueError: an already-imported module lacks a spec
            spec = None
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            h.update(b"tiny-builder\0")
            _hash_file(h, Path(spec.origin))
    return h.hexdigest()


# --------------------------------------------------------------------------- reading files


def _unreadable(path: Path, exc: BaseException) -> RecipeError:
    return RecipeError(
        f"data file {path}: cannot read it ({type(exc).__name__}: {exc}). "
        "Check the file's permissions and that it is UTF-8 text or valid parquet.",
        key="data.path",
    )


def _row_error(label: str, row: int, problem: str, fix: str) -> RecipeError:
    return RecipeError(f"{label}, row {row}: {problem}. {fix}", key="data.path")


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: tolerate the BOM some editors/Excel write.
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc


def _read_json_lines(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    label = f"data file {path}"
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _row_error(
                label,
                lineno,
                f"invalid JSON ({exc.msg} at column {exc.colno})",
                "Each line must be one JSON object; fix or remove the line.",
            ) from exc
        if not isinstance(record, dict):
            raise _row_error(
                label,
                lineno,
                f"expected a JSON object, got {type(record).__name__}",
                'Each line must be one JSON object like {"messages": [...]}.',
            )
        records.append((lineno, record))
    return records


def _read_json(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    if not text.lstrip().startswith("["):
        # Many `.json` files are really JSON lines; read them as such.
        return _read_json_lines(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecipeError(
            f"data file {path}, line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})."
            " A .json file must hold a list of objects or one object per line.",
            key="data.path",
        ) from exc
    records = []
    for i, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise _row_error(
                f"data file {path}",
                i,
                f"expected a JSON object, got {type(record).__name__}",
                "The list must contain one object per row.",
            )
        records.append((i, record))
    return records


def _read_csv(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    records = []
    reader = csv.DictReader(text.splitlines())
    try:
        for i, record in enumerate(reader, start=1):
            if None in record:  # DictReader files surplus cells under the key None
                raise _row_error(
                    f"data file {path}",
                    i,
                    "the row has more cells than the header",
                    "Quote cells that contain commas, or fix the row.",
                )
            records.append((i, dict(record)))
    except csv.Error as exc:
        raise _unreadable(path, exc) from exc
    return records


def _read_parquet(path: Path) -> list[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several unrelated types for bad files
        raise _unreadable(path, exc) from exc
    return list(enumerate(rows, start=1))


def _read_file(path: Path) -> _Split:
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        raise RecipeError(
            f"data file {path} has an unsupported extension `{suffix or '(none)'}`. "
            f"Supported: {', '.join(EXTENSIONS)}, a folder of those (train.*, eval.*), "
            "or a folder written by datasets' save_to_disk.",
            key="data.path",
        )
    if suffix == ".parquet":
        records = _read_parquet(path)
    else:
        text = _read_text(path)
        reader = {".jsonl": _read_json_lines, ".json": _read_json, ".csv": _read_csv}[suffix]
        records = reader(path, text)
    return _Split(label=f"data file {path}", records=records, base_dir=path.parent)


def _split_from_dataset(ds: Any, label: str, base_dir: Path | None) -> _Split:
    # Iterating decodes Image features to PIL, which _convert_images accepts.
    return _Split(label=label, records=list(enumerate(ds, start=1)), base_dir=base_dir)


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
            _split_from_dataset(dd[train], f"saved dataset {path} (split {train})", path),
            _split_from_dataset(dd[ev], f"saved dataset {path} (split {ev})", path) if ev else None,
        )
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        import datasets

        ds = datasets.load_from_disk(str(path))
        return _split_from_dataset(ds, f"saved dataset {path}", path), None
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
        _split_from_dataset(dd[train], f"hub dataset {name} (split {train})", None),
        _split_from_dataset(dd[ev], f"hub dataset {name} (split {ev})", None) if ev else None,
    )


# --------------------------------------------------------------------------- row conversion


class _Rows:
    """Converts one split's records, naming the split and row in every error."""

    def __init__(self, split: _Split, fmt: str, columns: Mapping[str, str]) -> None:
        self.split = split
        self.fmt = fmt
        self.columns = columns
        self.row = 0
        self.record: dict[str, Any] = {}

    def fail(self, problem: str, fix: str) -> RecipeError:
        return _row_error(self.split.label, self.row, problem, fix)

    def name(self, canon: str) -> str:
        return self.columns.get(canon, canon)

    def get(self, canon: str, required: bool = True) -> Any:
        name = self.name(canon)
        value = self.record.get(name)
        if value is None and required:
            mapped = f" (data.columns.{canon})" if name != canon else ""
            cols = ", ".join(map(str, self.record)) or "none"
            raise self.fail(
                f"`{name}`{mapped} is missing (columns: {cols})", _COLUMNS_FIX.format(canon=canon)
            )
        return value

    def text(self, canon: str, required: bool = True) -> str:
        value = self.get(canon, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail(
                f"`{self.name(canon)}` must be a string, got {type(value).__name__}",
                "Quote the value in the data file.",
            )
        if required and not value.strip():
            raise self.fail(f"`{self.name(canon)}` is empty", "Fill it in or remove the row.")
        return value

    def convert(self) -> list[dict[str, Any]]:
        out = []
        for row, record in self.split.records:
            self.row, self.record = row, record  # read by fail()/get() for error messages
            if self.fmt == "messages":
                out.append({"messages": self.messages(parts=False)[0]})
            elif self.fmt == "prompt_completion":
                out.append({"prompt": self.text("prompt"), "completion": self.text("completion")})
            elif self.fmt == "alpaca":
                out.append({"messages": self.alpaca()})
            else:
                out.append(self.vlm())
        return out

    def alpaca(self) -> list[dict[str, str]]:
        instruction, extra = self.text("instruction"), self.text("input", required=False)
        user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
        return [
            {"role": "user", "content": user},
            {"role": "assistant", "content": self.text("output")},
        ]

    def messages(self, parts: bool) -> tuple[list[dict[str, Any]], bool]:
        """Validated messages and whether every content was a plain string."""
        canon, value = "messages", self.get("messages")
        name = self.name(canon)
        if isinstance(value, str):
            # CSV cells (and some exports) hold the conversation as a JSON string.
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        if not isinstance(value, list) or not value:
            raise self.fail(
                f"`{name}` must be a non-empty list of {{role, content}} objects, "
                f"got {type(value).__name__}",
                'Write it like [{"role": "user", "content": "..."}, '
                '{"role": "assistant", "content": "..."}].',
            )
        result, all_strings = [], True
        for j, msg in enumerate(value, start=1):
            if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
                raise self.fail(
                    f"message {j} of `{name}` is not a {{role, content}} object",
                    "Give every message a `role` and a `content`.",
                )
            role = msg["role"]
            if role not in ROLES:
                raise self.fail(
                    f"message {j} has role `{role}`",
                    f"Roles must be one of {', '.join(ROLES)}.",
                )
            content = msg["content"]
            if isinstance(content, str) or not parts:
                content = self.text_content(j, content)
                if parts:
                    content = [{"type": "text", "text": content}]
            else:
                all_strings = False
                content = self.parts(j, content)
            result.append({"role": role, "content": content})
        self.check_turns([m["role"] for m in result])
        return result, all_strings

    def check_turns(self, roles: list[str]) -> None:
        """An optional system message first, then user and assistant turns in alternation,
        ending with the assistant reply the model learns (what chat templates assume)."""
        for j, role in enumerate(roles, start=1):
            expected = _expected_role(roles[: j - 1])
            if role not in expected:
                raise self.fail(
                    f"message {j} is from `{role}` where {' or '.join(expected)} comes "
                    f"(roles: {', '.join(roles)})",
                    "Start with an optional system message, then alternate user and assistant "
                    "turns.",
                )
        if roles[-1] != "assistant":
            raise self.fail(
                f"the last message is from `{roles[-1]}`, not `assistant`",
                "End each conversation with the assistant reply the model should learn.",
            )

    def text_content(self, j: int, content: Any) -> str:
        if not isinstance(content, str):
            hint = (
                " (content lists with image/text parts need data.format=vlm and a VLM stage)"
                if isinstance(content, list)
                else ""
            )
            raise self.fail(
                f"message {j} content must be a string, got {type(content).__name__}{hint}",
                "Write the message text as a string.",
            )
        if not content.strip():
            raise self.fail(f"message {j} has empty content", "Fill it in or remove the row.")
        return content

    def parts(self, j: int, content: Any) -> list[dict[str, Any]]:
        if not isinstance(content, list) or not content:
            raise self.fail(
                f"message {j} content must be a string or a non-empty list of parts, "
                f"got {type(content).__name__}",
                'Use [{"type": "image"}, {"type": "text", "text": "..."}].',
            )
        out = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "image":
                out.append({"type": "image", "text": None})
            elif kind == "text":
                text = part.get("text")
                if not isinstance(text, str) or not text.strip():
                    raise self.fail(
                        f"message {j} has a text part with empty or non-string `text`",
                        'Give each text part a string: {"type": "text", "text": "..."}.',
                    )
                out.append({"type": "text", "text": text})
            else:
                raise self.fail(
                    f"message {j} has a content part that is not "
                    f'{{"type": "image"}} or {{"type": "text", ...}}: {part!r}',
                    "Use only image and text parts.",
                )
        return out

    def vlm(self) -> dict[str, Any]:
        images = self.images(self.get("images", required=False))
        messages, all_strings = self.messages(parts=True)
        placeholders = sum(1 for m in messages for p in m["content"] if p["type"] == "image")
        if placeholders == 0 and images and all_strings:
            # Same rule as TRL's prepare_multimodal_messages: plain-text rows get their image
            # placeholders before the first user message's text.
            for m in messages:
                if m["role"] == "user":
                    m["content"] = [{"type": "image", "text": None} for _ in images] + m["content"]
                    break
            placeholders = len(images) if any(m["role"] == "user" for m in messages) else 0
        if placeholders != len(images):
            raise self.fail(
                f'{placeholders} image placeholder(s) ({{"type": "image"}}) '
                f"but {len(images)} image(s) in `{self.name('images')}`",
                "Give one entry in the images list per image placeholder.",
            )
        return {"images": images, "messages": messages}

    def images(self, value: Any) -> list[Any]:
        if value is None:
            return []  # text-only rows are fine in a VLM dataset
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                value = json.loads(value)  # CSV cells hold lists as JSON
            except json.JSONDecodeError:
                pass
        if not isinstance(value, list):
            value = [value]
        return [self.image(k, item) for k, item in enumerate(value, start=1)]

    def image(self, k: int, item: Any) -> Any:
        from PIL import Image

        if isinstance(item, Image.Image):
            return item
        if isinstance(item, Mapping) and item.get("bytes"):
            return {"bytes": item["bytes"], "path": item.get("path")}
        if isinstance(item, Mapping) and item.get("path"):
            item = item["path"]
        if not isinstance(item, str) or not item:
            raise self.fail(
                f"image {k} in `{self.name('images')}` is {type(item).__name__}, not a file path",
                "List image paths (relative to the data file) as strings.",
            )
        path = Path(item).expanduser()
        if not path.is_absolute() and self.split.base_dir is not None:
            path = self.split.base_dir / path
        if not path.is_file():
            raise self.fail(
                f"image file {path} (image {k}) does not exist",
                "Image paths are relative to the data file's folder; fix the path or the row.",
            )
        try:
            with Image.open(path):  # parses the header only: cheap, catches non-images
                pass
        except Exception as exc:  # PIL raises many types for bad files
            raise self.fail(
                f"image file {path} (image {k}) is not a readable image ({exc})",
                "Replace the file with a PNG/JPEG image.",
            ) from exc
        # Keep the path, not pixels: `datasets` decodes lazily, so big VLM sets fit in memory.
        return {"path": str(path), "bytes": None}


def _expected_role(before: list[str]) -> tuple[str, ...]:
    turns = [r for r in before if r != "system"]
    if not before:
        return ("system", "user")
    return ("user",) if not turns or turns[-1] == "assistant" else ("assistant",)


def _detect(split: _Split, columns: Mapping[str, str]) -> str:
    keys: set[str] = set()
    for _, record in split.records:
        keys.update(k for k, v in record.items() if v is not None)

    def fits(names: tuple[str, ...]) -> bool:
        return all(n in columns or n in keys for n in names)

    def content_parts() -> bool:
        name = columns.get("messages", "messages")
        return any(
            isinstance(m, Mapping) and isinstance(m.get("content"), list)
            for _, record in split.records
            if isinstance(record.get(name), list)
            for m in record[name]
        )

    layouts = (
        ("vlm", ("images",), ("images",)),
        ("messages", ("messages",), ("messages",)),
        ("prompt_completion", ("prompt", "completion"), ("prompt", "completion")),
        ("alpaca", ("instruction", "output"), ("instruction", "input", "output")),
    )
    # Explicitly mapped columns state the intended format first, so a misspelt mapping gets the
    # row-level "`x` (data.columns.y) is missing" error instead of another format's.
    for explicit in (True, False):
        for fmt, required, names in layouts:
            if fits(required) and (not explicit or any(n in columns for n in names)):
                if fmt == "messages" and content_parts():
                    return "vlm"  # content parts without an images column: a VLM layout
                return fmt
    raise RecipeError(
        f"{split.label}: cannot tell the data format from its columns "
        f"({', '.join(sorted(keys)) or 'none'}). Expected `messages`, `prompt`+`completion`, "
        "`instruction`+`output` (Alpaca) or `images`+`messages`. Set data.format and map "
        "columns with data.columns.<name>=<your column>.",
        key="data.format",
    )


def _features(fmt: str) -> Any:
    import datasets as ds

    message = {"role": ds.Value("string"), "content": ds.Value("string")}
    if fmt == "messages":
        return ds.Features({"messages": ds.List(message)})
    if fmt == "prompt_completion":
        return ds.Features({"prompt": ds.Value("string"), "completion": ds.Value("string")})
    part = {"type": ds.Value("string"), "text": ds.Value("string")}
    return ds.Features(
        {
            "images": ds.List(ds.Image(mode="RGB")),  # decoded to RGB PIL images on access
            "messages": ds.List({"role": ds.Value("string"), "content": ds.List(part)}),
        }
    )


def _fraction_split(
    rows: list[dict[str, Any]], fraction: float, seed: int, label: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
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
    train = [r for i, r in enumerate(rows) if i not in eval_idx]
    ev = [r for i, r in enumerate(rows) if i in eval_idx]
    return train, ev


def load_splits(cfg: DataConfig | Mapping[str, Any], *, kind: str, seed: int = 0) -> DataSplits:
    """Read, validate (every row) and convert the data into TRL-ready train/eval datasets.

    `kind` is the stage's model kind: "vlm" accepts any format, "causal_lm" rejects VLM rows.
    """
    cfg = _mapping(cfg)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    source, fmt, columns = _source(cfg), _format(cfg), _columns(cfg)
    fraction, max_samples = _eval_fraction(cfg), _max_samples(cfg)
    identity = data_identity(cfg)

    if source == "hub":
        train_split, eval_split = _read_hub(cfg)
    else:
        train_split, eval_split = _read_local(resolve_path(cfg), cfg)

    if not train_split.records:
        raise RecipeError(f"{train_split.label} has no rows. Add data.", key="data.path")
    if eval_split is not None and not eval_split.records:
        raise RecipeError(
            f"{eval_split.label} has no rows. Add rows or delete the eval file.", key="data.path"
        )
    if fmt == "auto":
        fmt = _detect(train_split, columns)
    if fmt == "vlm" and kind == "causal_lm":
        raise RecipeError(
            f"{train_split.label} holds vision-language rows (images / image parts) but this "
            "stage trains a text-only model. Use a vision-language model or a text dataset.",
            key="data.format",
        )

    train_rows = _Rows(train_split, fmt, columns).convert()
    eval_rows = _Rows(eval_split, fmt, columns).convert() if eval_split else None
    if eval_rows is None and fraction > 0:
        train_rows, eval_rows = _fraction_split(train_rows, fraction, seed, train_split.label)
    if max_samples is not None:
        train_rows = train_rows[:max_samples]

    import datasets

    out_fmt = "messages" if fmt == "alpaca" else fmt
    features = _features(out_fmt)
    return DataSplits(
        train=datasets.Dataset.from_list(train_rows, features=features),
        eval=datasets.Dataset.from_list(eval_rows, features=features) if eval_rows else None,
        identity=identity,
        format=out_fmt,
    )
