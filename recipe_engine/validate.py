"""Check library settings against the libraries' own classes before anything loads.

`train` keys are SFTConfig fields, `lora` keys LoraConfig fields, `quantization` keys
BitsAndBytesConfig arguments. Importing TRL costs several seconds, so the field tables are
read from the installed classes once per library version and kept in the cache folder.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError, unknown_key

# (module, class, distribution that versions it); dataclasses list their fields,
# BitsAndBytesConfig its __init__ arguments.
LIBRARY_CLASSES = {
    "SFTConfig": ("trl", "SFTConfig", "trl"),
    "LoraConfig": ("peft", "LoraConfig", "peft"),
    "BitsAndBytesConfig": ("transformers", "BitsAndBytesConfig", "transformers"),
}
INIT_SIGNATURE_CLASSES = {"BitsAndBytesConfig"}

# Trainer settings the engine owns; the value says where the user sets them instead.
ENGINE_OWNED_TRAIN_KEYS = {
    "output_dir": "the engine's store (`output_root`)",
    "use_cpu": "`device=cpu`",
    "no_cuda": "`device=cpu`",
    "seed": "the top-level `seed`",
    "data_seed": "the top-level `seed`",
    "gradient_checkpointing": "`stage.<name>.gradient_checkpointing`",
    "bf16": "`stage.<name>.dtype`",
    "fp16": "`stage.<name>.dtype`",
    "resume_from_checkpoint": "`fresh=true` to start over (resuming is automatic)",
}
POSITIVE_TRAIN_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "per_device_eval_batch_size",
)
NON_NEGATIVE_TRAIN_KEYS = ("learning_rate", "weight_decay", "warmup_steps", "warmup_ratio")
ENGINE_LORA_KEYS = {"components"}
ENGINE_QUANT_KEYS = {"components", "on_unsupported"}
DTYPES = ("auto", "float32", "bfloat16", "float16")


def cache_dir() -> Path:
    from recipe_engine.tiny import default_cache_dir

    return default_cache_dir()


def library_fields(class_name: str) -> dict[str, str]:
    """Field name -> type text of one library settings class, cached per installed version."""
    module, attr, dist = LIBRARY_CLASSES[class_name]
    version = metadata.version(dist)
    cached = cache_dir() / "fields" / f"{class_name}-{dist}-{version}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    cls = getattr(importlib.import_module(module), attr)
    if class_name not in INIT_SIGNATURE_CLASSES:
        fields = {f.name: _type_text(f.type) for f in dataclasses.fields(cls) if f.init}
    else:
        params = inspect.signature(cls.__init__).parameters
        fields = {
            n: _type_text(p.annotation)
            for n, p in params.items()
            if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(fields, indent=1))
    tmp.replace(cached)
    return fields


def _type_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "Any"
    return (
        annotation
        if isinstance(annotation, str)
        else getattr(annotation, "__name__", str(annotation))
    )


def check_train(stage: str, train: Mapping[str, Any]) -> None:
    """Keys are SFTConfig fields the engine doesn't own; values have sane types and signs."""
    fields = library_fields("SFTConfig")
    for key, value in train.items():
        full = f"stage.{stage}.train.{key}"
        if key in ENGINE_OWNED_TRAIN_KEYS:
            raise RecipeError(
                f"`{full}` is set by the engine; use {ENGINE_OWNED_TRAIN_KEYS[key]} instead.",
                key=full,
            )
        if key not in fields:
            raise unknown_key(full, fields, "the trainer settings (SFTConfig fields)")
        _check_type(full, value, fields[key])
    for key in POSITIVE_TRAIN_KEYS:
        if key in train and _is_number(train[key]) and train[key] <= 0:
            raise RecipeError(
                f"`stage.{stage}.train.{key}` is {train[key]}; it must be a positive number.",
                key=f"stage.{stage}.train.{key}",
            )
    for key in NON_NEGATIVE_TRAIN_KEYS:
        if key in train and _is_number(train[key]) and train[key] < 0:
            raise RecipeError(
                f"`stage.{stage}.train.{key}` is {train[key]}; it must not be negative "
                "(e.g. learning_rate=2e-4).",
                key=f"stage.{stage}.train.{key}",
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_type(key: str, value: Any, type_text: str) -> None:
    """Catch the common mistakes (a word where a number goes) without re-implementing typing."""
    if value is None:
        return
    words = set(re.findall(r"[A-Za-z_]+", type_text))
    if words & {"str", "Any", "dict", "list", "tuple"}:
        return  # free-form settings: the library checks them when SFTConfig is built
    expected = words & {"int", "float", "bool"}
    if not expected:
        return
    ok = (
        ("bool" in expected and isinstance(value, bool))
        or ("int" in expected and isinstance(value, int) and not isinstance(value, bool))
        or ("float" in expected and _is_number(value))
    )
    if not ok:
        raise RecipeError(
            f"`{key}` is {value!r} ({type(value).__name__}); expected {type_text}.", key=key
        )


def check_lora_keys(stage: str, lora: Mapping[str, Any]) -> None:
    """The policy's own LoRA checks, with keys named from the recipe root."""
    from recipe_engine.policies.lora import validate_lora

    with stage_keys(stage, "lora"):
        validate_lora(lora)


def check_quant_keys(stage: str, quant: Mapping[str, Any]) -> None:
    """The policy's own quantization checks, with keys named from the recipe root."""
    from recipe_engine.policies.quant import validate_quantization

    with stage_keys(stage, "quantization"):
        validate_quantization(quant)


@contextmanager
def stage_keys(stage: str, section: str) -> Iterator[None]:
    """Policies name keys relative to the stage (`lora.r`); users type `stage.<name>.lora.r`."""
    try:
        yield
    except RecipeError as error:
        qualified = f"stage.{stage}.{section}"
        text = re.sub(rf"`{section}\b", f"`{qualified}", str(error))
        key = error.key and (
            f"stage.{stage}.{error.key}" if error.key.startswith(section) else error.key
        )
        raise RecipeError(text, key=key) from None


def quant_bits(quant: Mapping[str, Any] | None) -> str:
    if not quant:
        return "none"
    return "4bit" if quant.get("load_in_4bit") else "8bit" if quant.get("load_in_8bit") else "none"


def check_dtype(stage: str, dtype: str) -> None:
    if dtype not in DTYPES:
        raise RecipeError(
            f"`stage.{stage}.dtype` is {dtype!r}; use one of {', '.join(DTYPES)}.",
            key=f"stage.{stage}.dtype",
        )
