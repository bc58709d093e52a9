"""Model sources: where a stage's starting weights come from, made concrete and checked.

A source is one of: a hub id at the commit its revision resolves to, a local save_pretrained
folder (or trainer checkpoint, or PEFT adapter), a GGUF file converted once into the cache, a
tiny built-in model, or the output of a parent stage. Each yields an `InitSource`: where
`from_pretrained` reads, what the stage key hashes (`identity`) and, for a hub model that
cannot be had from here, why. A new source is one more branch of `model_source`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.resolve import cache, gguf, hub_models, model_files
from recipe_engine.resolve.hub_revisions import HubRevision, HubRevisions
from recipe_engine.resolve.models import model_location
from recipe_engine.resolve.tiny.build import VERSION as TINY_BUILD_VERSION
from recipe_engine.resolve.tiny.models import TINY_MODELS

# Where a stage's weights come from.
HUB, TINY, LOCAL, PARENT = "hub", "tiny", "local", "stage"


@dataclass(frozen=True)
class InitSource:
    """A stage's starting weights: a hub id (+ revision), a local folder, or a parent stage."""

    kind: str  # HUB | TINY | LOCAL | PARENT
    description: str  # in words, as `plan` and the run table print it
    location: str | None = None  # what from_pretrained gets; None for a parent stage
    revision: str | None = None  # a hub model's: the resolved commit when one is known
    parent: str | None = None  # the parent stage's name (PARENT only)
    adapter: bool = False  # a local PEFT adapter folder: merged into its base before loading
    unavailable: str | None = None  # a hub model that cannot be had here: why (plan only)
    identity: Any = None  # what the stage key hashes (a parent is hashed through its key)
    hub_revision: HubRevision | None = None  # a hub model's commit and how it was chosen


def check_model_entry(model: ModelConfig) -> None:
    """The model entry's own settings, before anything is looked up by them (its closed
    choices, `source`, `kind` and `dtype`, are typed: composition refused any other)."""
    if model.gguf_file:
        _check_gguf_entry(model)
    if model.processor:
        _check_processor_settings(model)


# The processor settings the memory estimate reads (plan.model_shape), by the type they take.
PIXEL_SETTINGS = ("min_pixels", "max_pixels", "patch_size", "merge_size", "temporal_patch_size",
                  "image_seq_len")  # fmt: skip
EDGE_SETTINGS = ("size", "max_image_size", "crop_size")  # {longest_edge: 1456, ...}
SWITCH_SETTINGS = ("do_resize", "do_image_splitting")


def _check_processor_settings(model: ModelConfig) -> None:
    """`model.processor` sets a VLM's processor, with the types the estimate counts by."""
    if model.kind != "vlm":
        raise RecipeError(
            f"`model.processor` sets a vision-language model's processor, but this entry is a "
            f"{model.kind} model (it loads a tokenizer). Remove model.processor.",
            key="model.processor",
        )
    for name, value in model.processor.items():
        key = f"model.processor.{name}"
        if name in PIXEL_SETTINGS and not _positive_int(value):
            wanted = "a positive whole number (pixels or patches)"
        elif name in EDGE_SETTINGS and not (
            isinstance(value, Mapping) and all(map(_positive_int, value.values()))
        ):
            wanted = f"a mapping of sides to pixels ({key}.longest_edge=1456)"
        elif name in SWITCH_SETTINGS and not isinstance(value, bool):
            wanted = "true or false"
        else:
            continue
        raise RecipeError(f"`{key}` is {value!r}; it takes {wanted}.", key=key)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_gguf_entry(model: ModelConfig) -> None:
    """`gguf_file` names a file in a local folder or a hub repository, holding a language model
    (transformers reads no vision tower from GGUF: a VLM's sits in a separate mmproj file)."""
    if model.source == "tiny":
        raise RecipeError(
            "`model.gguf_file` is set on a tiny model, which is built from config. Use "
            "model.source=local (the file in folder model.id) or model.source=hub (the file in "
            "repository model.id), or unset model.gguf_file.",
            key="model.gguf_file",
        )
    if model.kind != "causal_lm":
        raise RecipeError(
            f"`model.gguf_file` is set on a {model.kind} entry, but transformers reads only "
            "language models from GGUF files. Use model.kind=causal_lm, or a save_pretrained "
            "folder or hub id for a vision-language model.",
            key="model.kind",
        )


def parent_source(parent: str) -> InitSource:
    return InitSource(PARENT, f"stage `{parent}` output", parent=parent)


def model_source(
    name: str, stage: StageConfig, recipe_model: ModelConfig, revisions: HubRevisions
) -> tuple[InitSource, ModelConfig]:
    """Where a root stage's weights come from, and the model entry they descend from (a hub
    model's at the commit `revisions` resolves its revision to)."""
    init = stage.init
    if init.path:  # a save_pretrained folder: the entry's GGUF file is not in it
        path = Path(os.path.expanduser(init.path)).resolve()
        model = dataclasses.replace(recipe_model, source=LOCAL, id=str(path), gguf_file=None)
        return _local_source(init.path, f"stage.{name}.init.path", model), model
    model, key = recipe_model, "model.id"
    if init.model:  # a hub id, or the name of a tiny built-in model
        source = TINY if init.model in TINY_MODELS else HUB
        model = dataclasses.replace(
            recipe_model, source=source, id=init.model, name=init.model, gguf_file=None
        )
        key = f"stage.{name}.init.model"
    if model.gguf_file:
        return _gguf_source(model, key), model
    if model.source == LOCAL:
        return _local_source(model.id, key, model), model
    if model.source == HUB:
        return _hub_source(model, key, revisions)
    # A tiny model: the weights its builder's version builds (a new version, other weights).
    identity = {
        "source": model.source,
        "id": model.id,
        "revision": model.revision,
        "build": TINY_BUILD_VERSION,
    }
    location = model_location(model)
    description = f"{model.source} model {model.id}"
    return InitSource(model.source, description, location, model.revision, identity=identity), model


def _hub_source(
    model: ModelConfig, key: str, revisions: HubRevisions
) -> tuple[InitSource, ModelConfig]:
    """A hub id at the commit its revision resolves to (given, pinned or resolved now). The
    commit replaces the entry's revision, so it enters the key, the checks, `run`'s
    from_pretrained and the manifest alike; unresolved (neither cached nor reachable), the
    entry stays as written and `run` refuses it here."""
    revision = revisions.resolve(model.id, model.revision)
    if revision is not None:
        model = dataclasses.replace(model, revision=revision.commit)
    unavailable = _check_hub_files(model, key)
    identity = {"source": HUB, "id": model.id, "revision": model.revision}
    at = f" at {revision.commit[:12]}" if revision else ""
    init = InitSource(
        HUB,
        f"hub model {model.id}{at}",
        model.id,
        model.revision,
        identity=identity,
        unavailable=unavailable,
        hub_revision=revision,
    )
    return init, model


def _local_source(given: str, key: str, model: ModelConfig) -> InitSource:
    path = Path(os.path.expanduser(given))
    if not path.exists():
        fix = (
            "Point it at a save_pretrained folder or a trainer checkpoint (checkpoint-N)."
            if key != "model.id"
            else "Use an existing save_pretrained folder, or model.source=hub for a hub id."
        )
        raise RecipeError(f"`{key}` is {given}, which does not exist. {fix}", key=key)
    resolved = path.resolve()
    identity = {"path": str(resolved), "files": tree_identity(path)}
    _check_model_files(resolved, key, model, identity)
    model_files.check_tokenizer_here(resolved, key)  # the stage loads its tokenizer from here
    return InitSource(
        LOCAL,
        f"local path {path}",
        str(resolved),
        adapter=(resolved / "adapter_config.json").is_file(),
        identity=identity,
    )


def _gguf_source(model: ModelConfig, key: str) -> InitSource:
    """A GGUF file (in local folder or hub repository `model.id`), converted once into the
    cache: the converted folder is checked and loaded like any folder; the key hashes the
    GGUF file itself (its name, size and SHA-256), so a rebuilt cache keeps every key."""
    converted = gguf.gguf_model(model)
    where = f"{model.source} GGUF {model.gguf_file} from {model.id}"
    if converted.folder is None:  # a hub file that cannot be had here: `run` refuses
        return InitSource(
            model.source,
            where,
            model.id,
            model.revision,
            identity=converted.identity,
            unavailable=converted.unavailable,
        )
    folder = converted.folder
    _check_model_files(folder, key, model, {"path": str(folder), "files": tree_identity(folder)})
    return InitSource(
        model.source,
        f"{where} (converted once: {folder.name} in the engine cache)",
        str(folder),
        model.revision,
        identity=converted.identity,
    )


def _check_model_files(folder: Path, key: str, model: ModelConfig, identity: Any) -> None:
    """The folder loads as this stage's kind of model: config, weights' headers, code
    (remembered per folder contents, as the headers do not change without the files)."""
    flags = {"kind": model.kind, "trust": model.trust_remote_code, "pickle": model.allow_pickle}

    def check() -> JsonObject:  # the cache's "models" record: the folder loads
        model_files.check_model_folder(
            folder,
            kind=model.kind,
            key=key,
            trust_remote_code=model.trust_remote_code,
            allow_pickle=model.allow_pickle,
        )
        return {"loadable": True}

    cache.remembered("models", {"files": identity, "key": key, **flags}, check)


def _check_hub_files(model: ModelConfig, key: str) -> str | None:
    """A hub id the hub has (or the cache, offline), whose cached files load; else why it
    cannot be had from here."""
    hub = hub_models.check_hub_model(model.id, model.revision, key=key)
    cached = hub.cached
    if cached is not None:
        _check_model_files(
            cached, key, model, {"path": str(cached), "files": tree_identity(cached)}
        )
    return hub.unavailable


def tree_identity(path: Path) -> list[tuple[str, int, int]]:
    """Names, sizes and mtimes of a folder's files: cheap, and changes when weights change."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [
        (str(p.relative_to(path.parent)), p.stat().st_size, int(p.stat().st_mtime)) for p in files
    ]
