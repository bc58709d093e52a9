"""Plan-time checks that a model a stage will load can load, before any weight is read.

A stage that fails while loading its model fails after data preparation, placement and often
a queue wait, with a transformers traceback that rarely names the recipe key at fault. These
checks read only what loading would read first (config.json, adapter_config.json, shard
indexes and safetensors headers) and refuse with one message naming the key, the path, what is
wrong and the fix. They never read tensors, so they are cheap even for large checkpoints.

Nothing here imports torch, transformers, safetensors or huggingface_hub at import time: the
libraries are imported inside the functions that use them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.errors import RecipeError, closest
from recipe_engine.files import JsonObject
from recipe_engine.resolve.hub_models import (
    Where,
    check_hub,
)

KIND_NAMES = {"vlm": "a vision-language model", "causal_lm": "a causal LM"}
# Files a data folder holds; seeing them where a model should be means the paths were mixed up.
_DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet", ".arrow")
# JSON files a model or checkpoint folder holds that are not data.
_MODEL_JSON = ("config.json", "tokenizer.json", "vocab.json", "tokens_map.json", "index.json")
_MODEL_JSON_NAMES = ("added_tokens.json", "chat_template.json", "trainer_state.json")
# Trainer checkpoint state (pickled too) that sits beside the weights but is not weights.
_TRAINER_STATE = ("optimizer", "scheduler", "scaler", "rng_state", "training_args")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class _Loading:
    """How the folder will be loaded: as which kind, and what the entry allows."""

    kind: str
    trust_remote_code: bool
    allow_pickle: bool


# --------------------------------------------------------------------------- local folders


def check_model_folder(
    path: Path,
    *,
    kind: str,
    key: str,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
) -> None:
    """Refuse (RecipeError, naming `key`) a folder `from_pretrained` could not load as `kind`.

    `kind` is "vlm" or "causal_lm". A PEFT adapter folder is checked, and so is its base
    model when the base is a local folder.
    """
    loading = _Loading(kind, trust_remote_code, allow_pickle)
    _check_folder(Path(path), Where(key, f"`{key}`"), loading)


def _check_folder(folder: Path, where: Where, loading: _Loading) -> None:
    if not folder.is_dir():
        raise where.refuse(folder, _not_a_folder(folder))
    # An adapter folder loads as adapter (see run.loading.is_adapter_folder), config or not.
    if (folder / "adapter_config.json").is_file():
        _check_adapter(folder, where, loading)
        return
    config = _read_config(folder, where)
    _check_architecture(folder, config, loading.kind, where, loading.trust_remote_code)
    for file in _weight_files(folder, where, loading.allow_pickle):
        _check_safetensors(file, folder, where)
    _check_loaded_json(folder, where)


# The JSON files a load reads beside config.json: the tokenizer's, the processor's, the
# generation settings. A damaged one would pass every check above and stop `run` mid-way.
LOADED_JSON = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "generation_config.json",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
)


# A tokenizer's vocabulary, under the names transformers' tokenizer classes read.
VOCABULARY = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def check_tokenizer_here(folder: Path, key: str) -> None:
    """A folder the stage loads its tokenizer (or processor) from holds a vocabulary: without
    one, transformers builds a tokenizer that splits nothing, and training fails mid-way."""
    if not any((folder / name).is_file() for name in VOCABULARY):
        raise Where(key, f"`{key}`").refuse(
            folder,
            f"it has no tokenizer vocabulary ({', '.join(VOCABULARY)}), which the stage loads "
            "from the same folder. Save the tokenizer beside the model "
            "(tokenizer.save_pretrained(folder)).",
        )


def _check_loaded_json(folder: Path, where: Where) -> None:
    template = folder / "chat_template.jinja"
    if template.is_file() and not template.read_text(encoding="utf-8", errors="replace").strip():
        raise where.refuse(  # a tokenizer loads it as its template: every row renders empty
            folder,
            "chat_template.jinja is empty. Delete it (the tokenizer config's own template, if "
            "any, is used) or save the chat template there again.",
        )
    for name in LOADED_JSON:
        file = folder / name
        if not file.is_file():
            continue
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise where.refuse(
                folder,
                f"{name} is not valid JSON ({error}): the model's tokenizer or processor "
                "files are damaged. Copy them again, or re-save the model (and its tokenizer) "
                "with save_pretrained.",
            ) from None


def _not_a_folder(path: Path) -> str:
    if not path.exists():
        return "it does not exist. Point it at a folder save_pretrained wrote."
    return (
        "it is a file, not a folder. Point it at the folder that holds the model "
        f"(config.json and weights), e.g. {path.parent}."
    )


def _read_config(folder: Path, where: Where) -> JsonObject:
    file = folder / "config.json"
    if not file.is_file():
        raise where.refuse(folder, _no_config(folder, where.key))
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise where.refuse(
            folder,
            f"config.json is not valid JSON ({error}). Re-download the model or re-save it "
            "with save_pretrained.",
        ) from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise where.refuse(
            folder,
            "config.json has no `model_type`, so transformers cannot tell which architecture "
            "to build. Re-save the model with save_pretrained (it writes model_type).",
        )
    return config


def _no_config(folder: Path, key: str) -> str:
    """Why a folder without config.json is not a model, and what the user likely meant."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if not entries:
        return "the folder is empty. Point it at a folder save_pretrained wrote."
    # (len, name) orders checkpoint-200 before checkpoint-1000, so the last is the latest.
    models = sorted(
        (p.name for p in entries if p.is_dir() and _holds_model(p)), key=lambda n: (len(n), n)
    )
    if models:
        return (
            f"it has no config.json, but folders inside it hold models ({', '.join(models[:4])}"
            f"{', ...' if len(models) > 4 else ''}). Point it at one, e.g. {folder / models[-1]}."
        )
    data = sorted(p.name for p in [*entries, *folder.glob("*/*")] if _is_data_file(p))
    if data:
        return (
            f"it has no config.json and holds data files ({', '.join(data[:3])}), so it looks "
            f"like a data folder. Data goes in `data.path`; point `{key}` at a model folder "
            "(config.json and weights)."
        )
    return (
        "it has no config.json, so it is not a save_pretrained folder. Point it at a folder "
        "a stage or save_pretrained wrote."
    )


def _holds_model(folder: Path) -> bool:
    return (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()


def _is_data_file(path: Path) -> bool:
    name = path.name
    if not path.is_file() or not name.endswith(_DATA_SUFFIXES):
        return False
    return not (name.endswith(_MODEL_JSON) or name in _MODEL_JSON_NAMES)


def _check_architecture(
    folder: Path, config: JsonObject, kind: str, where: Where, trust_remote_code: bool
) -> None:
    """The model type must be one transformers builds (or trusted remote code), of `kind`."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = str(config["model_type"])
    remote = "auto_map" in config
    # A known model_type loads with transformers' own code even when auto_map is present
    # (trust_remote_code=False ignores it), so only an unknown one needs the checkpoint's code.
    if model_type not in CONFIG_MAPPING_NAMES and not remote:
        near = closest(model_type, CONFIG_MAPPING_NAMES)
        hint = f" Did you mean `{near}`?" if near else ""
        raise where.refuse(
            folder,
            f"config.json has model_type `{model_type}`, which transformers "
            f"{transformers.__version__} does not know.{hint} Fix model_type in config.json, "
            "or upgrade transformers if the architecture is newer than it.",
        )
    if model_type not in CONFIG_MAPPING_NAMES and not trust_remote_code:
        raise where.refuse(
            folder,
            f"its model (model_type `{model_type}`) is defined by Python code shipped with the "
            "checkpoint (auto_map in config.json), which runs only with trust_remote_code. Set "
            "`model.trust_remote_code=true` only if you trust that code.",
        )
    if remote and trust_remote_code:
        return  # the checkpoint's own code decides which classes exist: nothing to compare
    _check_kind(folder, model_type, kind, where)


def _check_kind(folder: Path, model_type: str, kind: str, where: Where) -> None:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    # What AutoModelForCausalLM / AutoModelForImageTextToText (run.loading) can build.
    loadable = {
        "causal_lm": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "vlm": MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    }
    if model_type in loadable[kind]:
        return
    other = "vlm" if kind == "causal_lm" else "causal_lm"
    if model_type in loadable[other]:
        raise where.refuse(
            folder,
            f"it is {KIND_NAMES[other]} (model_type {model_type}), but this stage trains "
            f"{KIND_NAMES[kind]}. Use a model entry with kind: {other} "
            f"(model=...), or set model.kind={other}.",
        )
    raise where.refuse(
        folder,
        f"its model_type {model_type} is neither a causal LM nor a vision-language model "
        f"transformers can load for training, but this stage trains {KIND_NAMES[kind]}. "
        f"Point it at {KIND_NAMES[kind]}.",
    )


def _weight_files(folder: Path, where: Where, allow_pickle: bool) -> list[Path]:
    """The safetensors files from_pretrained will read (pickle weights are only located)."""
    # The names from_pretrained looks for, in its order; other names it never loads.
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return _shards(folder, index, where)
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    pickle_index = folder / "pytorch_model.bin.index.json"
    if (folder / "pytorch_model.bin").is_file() or pickle_index.is_file():
        if not allow_pickle:
            raise where.refuse(folder, _pickle_refusal("pytorch_model.bin"))
        if pickle_index.is_file():
            _shards(folder, pickle_index, where)
        return []  # a pickle file has no header to read without unpickling it
    others = sorted(
        p.name
        for p in folder.iterdir()
        if p.name.endswith((".safetensors", *_PICKLE_SUFFIXES))
        and not p.name.startswith(_TRAINER_STATE)
    )
    if others:
        raise where.refuse(
            folder,
            f"its weights ({', '.join(others[:3])}) are not under a name from_pretrained "
            "loads (model.safetensors, model.safetensors.index.json or pytorch_model.bin). "
            "Re-save the model with save_pretrained.",
        )
    raise where.refuse(
        folder,
        "it holds a config only, no weights (no model.safetensors, "
        "model.safetensors.index.json or pytorch_model.bin). Copy the weights beside "
        "config.json, or re-save the model with save_pretrained.",
    )


def _pickle_refusal(name: str) -> str:
    return (
        f"its weights are a pickle file only ({name}), and unpickling runs arbitrary code. "
        "Convert them to safetensors (load and save_pretrained them where you trust them), or "
        "set `model.allow_pickle=true` if you trust the file."
    )


def _shards(folder: Path, index: Path, where: Where) -> list[Path]:
    """The shard files a weight index names; all must be present."""
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise where.refuse(
            folder,
            f"{index.name} is not a valid shard index (JSON with a weight_map). Re-download "
            "the model or re-save it with save_pretrained.",
        ) from None
    missing = [name for name in names if not (folder / str(name)).is_file()]
    if missing:
        more = ", ..." if len(missing) > 3 else ""
        raise where.refuse(
            folder,
            f"{index.name} names {len(names)} shard files and {len(missing)} of them are "
            f"missing ({', '.join(map(str, missing[:3]))}{more}): the download or copy is "
            "incomplete. Re-download the model or copy the missing shards.",
        )
    return [folder / str(name) for name in names]


def _check_safetensors(
    file: Path,
    folder: Path,
    where: Where,
    fix: str = "Re-download the model, or re-save it with save_pretrained.",
) -> None:
    from safetensors import SafetensorError, safe_open

    # safe_open memory-maps the file and parses only its header; it also checks that the
    # header's tensor offsets cover the file exactly, so a truncated file fails here too.
    try:
        with safe_open(str(file), framework="np"):
            pass
    except (SafetensorError, OSError) as error:
        raise where.refuse(
            folder,
            f"{file.name} is damaged or truncated ({error}). {fix}",
        ) from None


def check_stage_weights(folder: Path, subject: str, fix: str) -> None:
    """The weights a stage output (full model or adapter) would load from, header and size, so
    a damaged file is one message naming it rather than the loader's error."""
    where = Where("target", subject)
    adapter = folder / "adapter_model.safetensors"
    if (folder / "adapter_config.json").is_file():
        files = [adapter] if adapter.is_file() else []
    else:
        files = _weight_files(folder, where, allow_pickle=True)
    for file in files:
        _check_safetensors(file, folder, where, fix)


def _check_adapter(folder: Path, where: Where, loading: _Loading) -> None:
    """A PEFT adapter: its config names a base, its weights are readable, its base loads."""
    base, revision = _adapter_base(folder, where)
    weights = folder / "adapter_model.safetensors"
    if weights.is_file():
        _check_safetensors(weights, folder, where)
    elif not (folder / "adapter_model.bin").is_file():
        raise where.refuse(
            folder,
            "it is a PEFT adapter folder (adapter_config.json) without adapter weights "
            "(adapter_model.safetensors). Copy them beside adapter_config.json, or re-save the "
            "adapter with save_pretrained.",
        )
    elif not loading.allow_pickle:
        raise where.refuse(folder, _pickle_refusal("adapter_model.bin"))
    base_where = Where(
        where.key, f"{where.subject} is the adapter {folder}; its base model (adapter_config.json)"
    )
    _check_adapter_base(folder, (base, revision), base_where, loading)


def _check_adapter_base(
    adapter: Path, named: tuple[str, str | None], where: Where, loading: _Loading
) -> None:
    """The base an adapter applies to (`named`: its folder or hub id, and revision): a local
    folder, or a hub id (offline: it must be cached)."""
    base, revision = named
    folder: Path | None = Path(base).expanduser()
    if folder.is_dir() and folder.resolve() == adapter.resolve():  # would check forever
        raise where.refuse(
            folder,
            "the adapter names itself as its base model. Set base_model_name_or_path in "
            "adapter_config.json to the base's folder or hub id.",
        )
    if not folder.is_dir():
        if base.startswith(("/", ".", "~")) or folder.exists():
            raise where.refuse(
                folder,
                "it is not a folder on this machine (was the adapter saved elsewhere?). "
                "Copy the base model there, or set base_model_name_or_path in "
                "adapter_config.json to its folder or hub id.",
            )
        hub = check_hub(base, revision, where, None)
        if hub.unavailable:  # the adapter is here, so its base is needed here
            raise RecipeError(hub.unavailable, key=where.key)
        folder = hub.cached  # None: the hub has it; fetched at load time
    if folder is not None:
        _check_folder(folder, where, loading)


def adapter_base_location(adapter: Path, base: str) -> str:
    """An adapter's `base_model_name_or_path` as `from_pretrained` should get it.

    The engine names a base in its store relative to the store (`./<key>`, as manifests do),
    so the store can be moved or copied; adapters live at `<store>/<key>/`, so a relative base
    found beside the adapter folder is that one. transformers would resolve it against the
    current directory instead: that is the fallback (a user's own relative path), and a hub
    id (`org/name`, nothing of that name beside the adapter) is returned as it is.
    """
    path = Path(base).expanduser()
    if path.is_absolute():
        return str(path)
    beside = adapter.parent / path
    return str(beside.resolve()) if beside.exists() else base


def _adapter_base(folder: Path, where: Where) -> tuple[str, str | None]:
    """The base model (folder or hub id) and revision an adapter's config names."""
    try:
        adapter = json.loads((folder / "adapter_config.json").read_text())
        base, revision = adapter["base_model_name_or_path"], adapter.get("revision")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        base, revision = None, None
    if not isinstance(base, str) or not base:
        raise where.refuse(
            folder,
            "its adapter_config.json is not valid JSON with a base_model_name_or_path, so the "
            "model the adapter applies to is unknown. Re-save the adapter with PEFT's "
            "save_pretrained, or set base_model_name_or_path to the base's hub id or folder.",
        )
    return adapter_base_location(folder, base), revision if isinstance(revision, str) else None
