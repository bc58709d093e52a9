"""What was read once, remembered: a second `plan` reads no rows and builds no meta model.

Reading every row costs seconds and building a model on the meta device costs seconds of
imports, so what such a read found is kept in the cache folder under a key made of the
content it was read from (the inputs the caller names: file hashes, config hashes, data
identities), the versions of the libraries that read it, and the version of what is recorded
(`RECORDS`). Facts about content do not change when the planner changes, so no list of the
engine's own source files is part of a key. A failed read is never kept (a library's verdict
that refuses a setting is a fact about it, and is).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipe_engine.config.library_keys import cache_dir
from recipe_engine.files import JsonObject, atomic_write_json
from recipe_engine.hashing import canonical_hash
from recipe_engine.versions import package_version

log = logging.getLogger("recipe_engine")

# What each kind of record holds, versioned: bump a kind's number when its reader changes
# what it records (a new field, another way of counting), so old records are not served.
RECORDS = {
    "inventory": 2,  # a model's parameters and modules on the meta device (2: LoRA's features)
    "models": 4,  # a model folder loads as its kind of model (4: its tokenizer files too)
    "rows": 4,  # a dataset's format and split sizes, checked row by row (4: its labels)
    # the longest training row: characters, messages, images (3: its text; 4: the images'
    # sizes, width and height, where 3 kept the largest pixel count)
    "lengths": 4,
    # the libraries' verdict on the planned SFTConfig / LoraConfig / bnb settings:
    # `{"accepted": true}`, or the refusal the child reported (2: refusals are kept too, and a
    # reader of 1 would take any record for an acceptance)
    "libraries": 2,
    "template-tokens": 1,  # what a chat template adds to a row, in its tokenizer's tokens
    "row-tokens": 1,  # a row's text in a tokenizer's tokens
    "file-sha256": 1,  # a file's SHA-256, by its path, size and mtime (a GGUF model file)
    "tool-templates": 1,  # whether a chat template renders tool calls (templates.renders_tools)
}
# Distributions of the `report_to` integrations (transformers' is_*_available checks).
TRACKERS = (
    "tensorboard",
    "tensorboardX",
    "wandb",
    "mlflow",
    "mlflow-skinny",  # what recipe-engine[mlflow] installs: the client without the server
    "comet_ml",
    "clearml",
    "dvclive",
    "swanlab",
    "trackio",
    "neptune",
    "neptune-client",
    "codecarbon",
    "dagshub",
    "azureml-core",
    "flytekit",
)
LIBRARIES_BY_KIND = {
    "inventory": ("torch", "transformers"),
    "rows": ("datasets", "trl", "pillow"),
    # The trackers too: whether `report_to` passes depends on which of them are installed.
    "libraries": ("trl", "transformers", "peft", "bitsandbytes", "accelerate", *TRACKERS),
    "models": ("transformers", "safetensors", "huggingface_hub"),
    "lengths": ("datasets",),
    "template-tokens": ("transformers", "tokenizers", "jinja2"),
    "row-tokens": ("transformers", "tokenizers"),
    "file-sha256": (),
    "tool-templates": ("trl", "transformers", "jinja2"),
}


def remembered(
    kind: str, inputs: Mapping[str, Any], read: Callable[[], JsonObject | None]
) -> JsonObject | None:
    """`read()`'s result for these inputs: from the cache, or computed (kept if not None).

    The cache only saves work: a record that cannot be read is computed again, and one that
    cannot be written (a full disk, a read-only cache) is not kept, and the plan goes on."""
    path = cache_dir() / kind / f"{_key(kind, inputs)}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        pass  # not cached yet, or a record damaged outside the engine: read again
    while _before_reading:
        _before_reading.pop()()
    result = read()
    if result is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, result)
        except OSError as error:
            log.warning("not cached (%s): %s", path, error.strerror or error)
    return result


@contextmanager
def before_first_read(prepare: Callable[[], None]) -> Iterator[None]:
    """Call `prepare` once, before the first record this block has to read rather than
    find: the planner starts its libraries' judge there (`run.preflight.start_judge`), so
    that a cold plan's reads and the judge's imports overlap, and a warm plan starts none."""
    _before_reading.append(prepare)
    try:
        yield
    finally:
        if prepare in _before_reading:
            _before_reading.remove(prepare)


# What `before_first_read` blocks wait to call (one per block; a plan holds one).
_before_reading: list[Callable[[], None]] = []


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions(kind: str) -> list[str | None]:
    """The installed versions of what records of this kind depend on: part of their key."""
    return [package_version(d) for d in LIBRARIES_BY_KIND[kind]]


def _key(kind: str, inputs: Mapping[str, Any]) -> str:
    return canonical_hash({"inputs": inputs, "record": RECORDS[kind], "versions": versions(kind)})
