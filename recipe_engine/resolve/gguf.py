"""GGUF model entries: the file found, then converted once into the engine's cache.

An entry with `gguf_file` names a GGUF file inside the local folder `id` (source: local) or the
hub repository `id` (source: hub). transformers reads GGUF files (`from_pretrained(...,
gguf_file=...)`, with the `gguf` package) and dequantizes the weights on load. The engine does
that once per file and saves the result as a plain save_pretrained folder (safetensors model +
tokenizer) in its cache; every later step (plan-time folder checks, loading, `inspect`,
`compare`) then treats that folder as the model. Stage keys hash the GGUF file itself (name,
size, SHA-256), not the converted folder, so clearing the cache does not retrain anything.

The conversion is written aside and renamed into place under a file lock, so concurrent
processes (sweep jobs, DDP ranks) convert once and share it. It is named by the file's content,
so every copy of one file shares it: the SmolLM2 file that each virtual environment installs
under its own path is converted once per machine, not once per environment (a conversion is
half a gigabyte and half a minute). Finding an existing conversion reads file stats and the
remembered SHA-256 of the file at that path, size and mtime: no torch, transformers or gguf
import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import JsonObject, share_as_umask
from recipe_engine.resolve import cache, hub_models

GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
RECORD = "gguf_source.json"  # in a converted folder: the file it came from (written last)
# Bump when the conversion writes something different, so stale conversions are not reused.
CONVERSION_VERSION = "1"
# transformers' own minimum (utils/import_utils.py GGUF_MIN_VERSION), when it cannot be read.
GGUF_MIN_VERSION = "0.10.0"


@dataclass(frozen=True)
class GgufModel:
    """A GGUF entry as the planner sees it: the converted folder, or why it cannot be had."""

    folder: Path | None  # the converted save_pretrained folder; None when unavailable
    identity: JsonObject  # what the stage key hashes for this init source
    unavailable: str | None = None  # a hub file that cannot be had from here: why


def gguf_model(model: ModelConfig, cache_dir: Path | None = None) -> GgufModel:
    """The entry's GGUF file, converted (once) into the cache."""
    file, unavailable = _locate(model)
    if file is None:
        identity = {k: getattr(model, k) for k in ("source", "id", "revision", "gguf_file")}
        return GgufModel(None, identity, unavailable)
    folder = convert_once(file, str(model.kind), cache_dir)
    record = json.loads((folder / RECORD).read_text())
    identity = {"gguf_file": model.gguf_file, "size": record["size"], "sha256": record["sha256"]}
    return GgufModel(folder, identity)


def converted_folder(model: ModelConfig, cache_dir: Path | None = None) -> Path:
    """What `from_pretrained` gets for a GGUF entry (refused when the file cannot be had)."""
    converted = gguf_model(model, cache_dir)
    if converted.folder is None:
        raise RecipeError(str(converted.unavailable), key="model.id")
    return converted.folder


# --------------------------------------------------------------------------- finding the file


def _locate(model: ModelConfig) -> tuple[Path | None, str | None]:
    name = str(model.gguf_file)
    if model.source == "hub":
        return _hub_file(model.id, model.revision, name)
    return _local_file(Path(os.path.expanduser(model.id)), name), None


def _local_file(folder: Path, name: str) -> Path:
    if folder.is_file() and folder.name.endswith(".gguf"):
        raise RecipeError(
            f"`model.id` is the GGUF file {folder}; it names the folder that holds it. Set "
            f"model.id={folder.parent} model.gguf_file={folder.name}.",
            key="model.id",
        )
    if not folder.is_dir():
        raise RecipeError(
            f"`model.id` is {folder}, which is not a folder. With model.gguf_file set it names "
            "the folder that holds the GGUF file.",
            key="model.id",
        )
    file = folder / name
    if not file.is_file():
        present = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.gguf"))
        listing = f"GGUF files there: {', '.join(present)}." if present else "It has no .gguf file."
        raise RecipeError(
            f"`model.gguf_file` is {name}, which is not in {folder}.{did_you_mean(name, present)} "
            f"{listing}",
            key="model.gguf_file",
        )
    _check_magic(file, name)
    return file


def _check_magic(file: Path, name: str) -> None:
    with open(file, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise RecipeError(
            f"`model.gguf_file` is {name} ({file}), which is not a GGUF file (it does not start "
            "with the GGUF magic bytes). Name a .gguf file, or leave model.gguf_file unset for a "
            "save_pretrained folder.",
            key="model.gguf_file",
        )


def _hub_file(model_id: str, revision: str | None, name: str) -> tuple[Path | None, str | None]:
    """The file from the Hugging Face cache, or downloaded; else why it cannot be had here."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model_id, name, revision=revision)
    if isinstance(cached, str):  # otherwise None or a "known missing" marker
        return Path(cached), None
    hub = hub_models.check_hub_model(model_id, revision, key="model.id")
    download = f"`hf download {model_id} {name}" + (f" --revision {revision}`" if revision else "`")
    if hub.unavailable:
        return None, f"{hub.unavailable} The file needed is model.gguf_file {name}: {download}."
    if hub_models.hub_offline():  # the repository's config is cached, the GGUF file is not
        return None, (
            f"`model.gguf_file` {name} of the hub model {model_id} is not in the local Hugging "
            f"Face cache, and HF_HUB_OFFLINE=1 is set. Download it where the hub is reachable "
            f"({download}), or use a local folder (model.source=local model.id=/path/to/folder)."
        )
    return _download(model_id, revision, name)


def _download(model_id: str, revision: str | None, name: str) -> tuple[Path | None, str | None]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    try:
        return Path(hf_hub_download(model_id, name, revision=revision)), None
    except EntryNotFoundError:
        present = _hub_gguf_files(model_id, revision)
        listing = f" GGUF files there: {', '.join(present)}." if present else ""
        raise RecipeError(
            f"`model.gguf_file` is {name}, which the hub repository {model_id} does not have."
            f"{did_you_mean(name, present)}{listing}",
            key="model.gguf_file",
        ) from None
    except (HfHubHTTPError, OSError) as error:  # the hub stopped answering mid-way
        return None, (
            f"`model.gguf_file` {name} of the hub model {model_id} could not be downloaded "
            f"({str(error).splitlines()[0]}). Try again, or use a local copy "
            "(model.source=local model.id=/path/to/folder)."
        )


def _hub_gguf_files(model_id: str, revision: str | None) -> list[str]:
    from huggingface_hub import HfApi

    try:
        files = HfApi().list_repo_files(model_id, revision=revision)
    except Exception:  # noqa: BLE001 - a hint only
        return []
    return sorted(f for f in files if f.endswith(".gguf"))


# --------------------------------------------------------------------------- converting once


def convert_once(file: Path, kind: str, cache_dir: Path | None = None) -> Path:
    """The save_pretrained folder converted from `file`, converting it first if no process
    has: written aside, renamed into place, under a lock shared by every process."""
    target = conversion_folder(file, kind, cache_dir)
    if (target / RECORD).is_file():  # only complete folders arrive (by rename)
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / RECORD).is_file():  # another process converted it while we waited
            return target
        _require_gguf_package(file)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            convert(file, kind, tmp)
            _write_record(file, tmp)
            _share(tmp)
            shutil.rmtree(target, ignore_errors=True)  # an incomplete folder left by hand
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def conversion_folder(file: Path, kind: str, cache_dir: Path | None = None) -> Path:
    """`<cache>/models/gguf/<file stem>-<hash>`: the hash is of the file's content (and the
    kind and conversion version), so it changes when the file does, and not when a copy of
    the same file sits elsewhere."""
    from recipe_engine.files import default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    named = f"{file_sha256(file)}\0{kind}\0{CONVERSION_VERSION}"
    digest = hashlib.sha256(named.encode()).hexdigest()[:12]
    return root / "models" / "gguf" / f"{file.name.removesuffix('.gguf')}-{digest}"


def file_sha256(file: Path) -> str:
    """The file's SHA-256, read once per path, size and mtime (`resolve.cache`): a GGUF file
    is gigabytes, and every plan asks."""
    resolved = file.resolve()
    stat = resolved.stat()
    stamp = {"path": str(resolved), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    recorded = cache.remembered("file-sha256", stamp, lambda: {"sha256": _read_sha256(resolved)})
    assert recorded is not None  # the read above never returns None
    return str(recorded["sha256"])


def _check_whole(file: Path) -> None:
    """Refuse a GGUF file that ends before the data its header lists (a download or copy that
    stopped): the reader's error names array shapes, and transformers' blames the
    architecture. The header is read through a memory map; no tensor is loaded."""
    from gguf import GGUFReader

    with file.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise RecipeError(
                f"`model.gguf_file` {file.name} is not a GGUF file (GGUF files start with the "
                "bytes `GGUF`). Point model.gguf_file at a .gguf model file.",
                key="model.gguf_file",
            )
    try:
        GGUFReader(str(file))
    except (ValueError, IndexError) as error:  # the data the header describes is not there
        raise RecipeError(
            f"`model.gguf_file` {file.name} is truncated or damaged: its header describes "
            f"more data than the file's {file.stat().st_size:,} bytes hold ({error}). "
            "Download or copy it again, whole.",
            key="model.gguf_file",
        ) from None


def _require_gguf_package(file: Path) -> None:
    """transformers reads GGUF files with the `gguf` package, at its own minimum version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        from transformers.utils.import_utils import GGUF_MIN_VERSION as needed
    except ImportError:
        needed = GGUF_MIN_VERSION
    try:
        installed = version("gguf") if importlib.util.find_spec("gguf") else None
    except PackageNotFoundError:
        installed = None
    from packaging.version import Version

    if installed is None or Version(installed) < Version(needed):
        have = f"gguf {installed} is installed" if installed else "it is not installed"
        raise RecipeError(
            f"`model.gguf_file` ({file.name}) is read with the `gguf` package (>= {needed}), "
            f"and {have}. Install it: pip install 'gguf>={needed}' (or the engine's extra: "
            "pip install -e '.[gguf]'; `make install` does).",
            key="model.gguf_file",
        )


def convert(file: Path, kind: str, into: Path) -> None:
    """Load the GGUF file dequantized (float32) and save model and tokenizer into `into`."""
    import torch
    import transformers

    # What run.loading's AutoModel class for `kind` loads (plan.models imports this module).
    auto = {"causal_lm": "AutoModelForCausalLM", "vlm": "AutoModelForImageTextToText"}[kind]
    where = {"pretrained_model_name_or_path": str(file.parent), "gguf_file": file.name}
    _check_whole(file)
    try:
        model = getattr(transformers, auto).from_pretrained(
            **where, dtype=torch.float32, quantization_config=_dequantize_config()
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
    except (OSError, ValueError, KeyError, RuntimeError, NotImplementedError) as error:
        raise RecipeError(
            f"`model.gguf_file` {file.name} could not be read by transformers "
            f"{transformers.__version__}: {str(error).splitlines()[0]} Check that its "
            "architecture is one transformers reads from GGUF, or use a save_pretrained folder.",
            key="model.gguf_file",
        ) from None
    drop_quantizer(model)
    model.save_pretrained(into, safe_serialization=True)
    tokenizer.save_pretrained(into)


def _dequantize_config() -> Any:
    """Ask for plain dense weights (transformers >= 5.x with GgufConfig); None: its default,
    which dequantizes every architecture it has no packed-GGUF kernels for."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return None
    return GgufConfig(dequantize=True)


def drop_quantizer(model: Any) -> None:
    """A GGUF-loaded model may keep its GGUF quantizer, and save_pretrained refuses a model
    whose quantizer is not serializable. With `dequantize=True` transformers 5.23 already
    removes it; older releases leave it on the model and in its config."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # transformers' own undoing: quantizer, config entry, flags
        quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _write_record(file: Path, into: Path) -> None:
    """The source file's identity (its SHA-256 enters stage keys), written last. `source`
    and `mtime_ns` say which copy was converted; other copies of the file share the folder."""
    resolved = file.resolve()
    stat = resolved.stat()
    record = {
        "gguf_file": file.name,
        "source": str(resolved),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": file_sha256(resolved),  # read once already, to name the folder
        "conversion": CONVERSION_VERSION,
    }
    (into / RECORD).write_text(json.dumps(record, indent=2) + "\n")


def _read_sha256(file: Path) -> str:
    sha = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _share(folder: Path) -> None:
    """mkdtemp and safetensors make private files; the cache may be shared between users, as
    far as their umask lets it be."""
    share_as_umask(folder)
