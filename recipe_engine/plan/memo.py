"""Checks that passed once, remembered: `plan` skips the meta model and the row check.

Building a model on the meta device costs seconds of imports and reading every row costs
seconds more, so a passing check is kept in the cache folder under a key made of everything
its outcome depends on: the inputs the caller names, the planner code that decided it and
the library versions. Any change to those checks again; a failing check is never kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from recipe_engine.config.library_keys import cache_dir
from recipe_engine.files import atomic_write_json
from recipe_engine.plan.dag import canonical_hash
from recipe_engine.versions import package_version

PACKAGE = Path(__file__).resolve().parents[1]
# The code whose behaviour each kind of check depends on (paths inside the package).
CODE = {
    "policies": (
        "plan/policy.py",
        "config/components.py",
        "config/layouts.yaml",
        "plan/policies/freeze.py",
        "plan/policies/lora.py",
        "plan/policies/quant.py",
    ),
    "rows": ("plan/data.py", "plan/data_rows.py"),
    "libraries": ("config/library_objects.py", "plan/library_check.py"),
    "models": ("plan/model_files.py",),
    "lengths": ("plan/memory_inputs.py", "plan/data.py", "plan/data_rows.py"),
}
# Distributions of the `report_to` integrations (transformers' is_*_available checks).
TRACKERS = (
    "tensorboard",
    "tensorboardX",
    "wandb",
    "mlflow",
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
    "policies": ("transformers", "peft", "bitsandbytes"),
    "rows": ("datasets",),
    # The trackers too: whether `report_to` passes depends on which of them are installed.
    "libraries": ("trl", "transformers", "peft", "bitsandbytes", "accelerate", *TRACKERS),
    "models": ("transformers", "safetensors", "huggingface_hub"),
    "lengths": ("datasets",),
}


def remembered(
    kind: str, inputs: Mapping[str, Any], check: Callable[[], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """`check()`'s result for these inputs: from the cache, or computed (and kept if not None)."""
    path = cache_dir() / kind / f"{_key(kind, inputs)}.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = check()
    if result is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, result)
    return result


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _key(kind: str, inputs: Mapping[str, Any]) -> str:
    return canonical_hash(
        {
            "inputs": inputs,
            "code": [file_digest(PACKAGE / f) for f in CODE[kind]],
            "versions": [package_version(d) for d in LIBRARIES_BY_KIND[kind]],
        }
    )
