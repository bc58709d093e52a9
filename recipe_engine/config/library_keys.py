"""Check library settings against the libraries' own classes before anything loads.

`train` keys are fields of the stage's trainer's settings class (`trainers`), `lora` keys
LoraConfig fields, `quantization` keys BitsAndBytesConfig arguments. Importing TRL costs
several seconds, so the field tables are read from the installed classes once per library
version and kept in the cache folder.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import json
import os
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.bounds import (
    LORA_BOUNDS,
    TRAIN_BOUNDS,
    check_bounds,
    check_finite,
    is_number,
)
from recipe_engine.config.components import validate_components
from recipe_engine.config.field_tables import shipped_fields
from recipe_engine.errors import RecipeError, did_you_mean, unknown_key
from recipe_engine.files import JsonObject, atomic_write_json
from recipe_engine.trainers import TRAINERS
from recipe_engine.versions import package_version


# (module, class, distribution that versions it); dataclasses list their fields,
# BitsAndBytesConfig its __init__ arguments.
def library_classes() -> dict[str, tuple[str, str, str]]:
    """Every settings class a recipe's keys belong to: the trainer kinds' (a plug-in's too),
    PEFT's LoraConfig, transformers' BitsAndBytesConfig."""
    return {
        **{k.settings_class: (k.module, k.settings_class, "trl") for k in TRAINERS.values()},
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
# `train` keys the engine reads itself. logging_dir: where TensorBoard writes the stage's events
# (default <run folder>/tensorboard/<stage>); SFTConfig lost the field in transformers 5.
ENGINE_TRAIN_KEYS = {"logging_dir"}
ENGINE_LORA_KEYS = {"components"}
ENGINE_QUANT_KEYS = {"components", "on_unsupported"}
# LoraConfig fields set by the engine (task) or derived from the freeze policy
# (modules_to_save); the rest are PEFT bookkeeping, not recipe material.
ENGINE_OWNED_LORA_KEYS = {
    "task_type",
    "modules_to_save",
    "peft_type",
    "auto_mapping",
    "peft_version",
}
DEFAULT_QUANT_COMPONENTS = ("language_model",)
ON_UNSUPPORTED = ("error", "skip")
QUANT_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8")
# Keys that only one of the two modes reads; BitsAndBytesConfig ignores the others silently.
_ONLY_4BIT = {
    "bnb_4bit_compute_dtype",
    "bnb_4bit_quant_type",
    "bnb_4bit_use_double_quant",
    "bnb_4bit_quant_storage",
}
_ONLY_8BIT = {"llm_int8_threshold", "llm_int8_has_fp16_weight"}
# Bumped when the cached field tables change shape.
FIELDS_FORMAT = "v2"


def cache_dir() -> Path:
    from recipe_engine.files import default_cache_dir

    return default_cache_dir()


@dataclass(frozen=True)
class LibraryField:
    """One setting of a library class: its type as text, and its choices when it has a
    fixed set (an Enum, a Literal, or the library's own `choices` metadata)."""

    type: str
    choices: tuple[str, ...] = ()


def library_fields(class_name: str) -> dict[str, LibraryField]:
    """Field name -> `LibraryField` of one library settings class: the user's cache, else the
    table shipped for the pinned versions (`field_tables`), else read from the class (an
    import of seconds) and cached per version."""
    _module, _attr, dist = library_classes()[class_name]
    version = package_version(dist)  # None: not installed (the import below says so)
    cached = cache_dir() / "fields" / f"{class_name}-{dist}-{version}-{FIELDS_FORMAT}.json"
    if version and cached.is_file():
        return _fields_of(_read(cached))
    shipped = shipped_fields(class_name)
    if shipped is not None:
        return _fields_of(shipped)
    recorded = read_library_fields(class_name)
    if version:  # fields of an unversioned import may change under the same name
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(cached, recorded)
    return _fields_of(recorded)


def read_library_fields(class_name: str) -> JsonObject:
    """One class's fields read from the installed library, as the cache records them."""
    module, attr, _dist = library_classes()[class_name]
    if module.startswith("trl.experimental"):  # its import warns of what `plan` notes already
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    fields = _read_fields(getattr(importlib.import_module(module), attr), class_name)
    return {k: {"type": v.type, "choices": list(v.choices)} for k, v in fields.items()}


def _fields_of(recorded: JsonObject) -> dict[str, LibraryField]:
    return {k: LibraryField(v["type"], tuple(v["choices"])) for k, v in recorded.items()}


def _read(path: Path) -> JsonObject:
    return json.loads(path.read_text())


def _read_fields(cls: type, class_name: str) -> dict[str, LibraryField]:
    if class_name in INIT_SIGNATURE_CLASSES:
        params = inspect.signature(cls.__init__).parameters
        return {
            n: LibraryField(_type_text(p.annotation))
            for n, p in params.items()
            if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: LibraryField(_type_text(f.type), _choices(hints.get(f.name), f.metadata))
        for f in dataclasses.fields(cls)
        if f.init
    }
    if "report_to" in fields:  # typed as free text; the integrations are the choices
        fields["report_to"] = dataclasses.replace(fields["report_to"], choices=_integrations())
    return fields


def _choices(hint: Any, metadata: Mapping[str, Any]) -> tuple[str, ...]:
    if "choices" in metadata:
        return tuple(str(c) for c in metadata["choices"])
    found: list[str] = []
    for arg in _flatten(hint):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            found += [str(member.value) for member in arg]
        elif typing.get_origin(arg) is typing.Literal:
            found += [str(v) for v in typing.get_args(arg) if isinstance(v, str)]
    return tuple(found)


def _flatten(hint: Any) -> list[Any]:
    """The leaves of a Union / list[...] type: `SchedulerType | str` -> [SchedulerType, str]."""
    args = typing.get_args(hint)
    if not args or typing.get_origin(hint) is typing.Literal:
        return [hint]
    return [leaf for arg in args for leaf in _flatten(arg)]


def _type_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "Any"
    return (
        annotation
        if isinstance(annotation, str)
        else getattr(annotation, "__name__", str(annotation))
    )


def _integrations() -> tuple[str, ...]:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return ("all", "none", *INTEGRATION_TO_CALLBACK)


def check_train(stage: str, train: Mapping[str, Any], settings_class: str = "SFTConfig") -> None:
    """Keys are fields of the stage trainer's settings class (SFTConfig, DPOConfig, ...) the
    engine doesn't own; values have the field's type, one of its choices, and lie in their
    range."""
    fields = library_fields(settings_class)
    for key, value in train.items():
        full = f"stage.{stage}.train.{key}"
        if key in ENGINE_OWNED_TRAIN_KEYS:
            raise RecipeError(
                f"`{full}` is set by the engine; use {ENGINE_OWNED_TRAIN_KEYS[key]} instead.",
                key=full,
            )
        if key in ENGINE_TRAIN_KEYS:
            _check_folder(full, value)
            continue
        if key not in fields:
            valid = [*fields, *ENGINE_TRAIN_KEYS]
            raise unknown_key(full, valid, f"the trainer settings ({settings_class} fields)")
        check_field(full, value, fields[key], settings_class)
    check_bounds(f"stage.{stage}.train", train, TRAIN_BOUNDS)


def check_train_for_one_of(stage: str, train: Mapping[str, Any], classes: list[str]) -> None:
    """`train` holds settings at least one of the settings `classes` takes (a stage whose
    trainer its rows choose: the chosen one's are checked once they are known); the first
    class's refusal otherwise."""
    refusals = []
    for settings_class in classes:
        try:
            return check_train(stage, train, settings_class)
        except RecipeError as refusal:
            refusals.append(refusal)
    raise refusals[0]


def _check_folder(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(
            f"`{key}` is {value!r}; expected a folder path ({key}=tb/my-stage), or drop it for "
            "the default, the run folder's tensorboard/<stage>.",
            key=key,
        )


def check_field(key: str, value: Any, field: LibraryField, class_name: str) -> None:
    """A value of the field's type and, where the library has a fixed set, one of its choices."""
    if not field.choices or not isinstance(value, str | list | tuple):
        _check_type(key, value, field.type)
        return
    given = value if isinstance(value, list | tuple) else str(value).split()
    for item in given:
        if not _is_choice(str(item), field.choices):
            raise RecipeError(
                f"`{key}` is {item!r}, which {class_name} does not accept."
                f"{did_you_mean(str(item), field.choices)} Choices: {', '.join(field.choices)}.",
                key=key,
            )


def _is_choice(value: str, choices: Sequence[str]) -> bool:
    # A choice such as `pissa_niter_[number of iters]` is a prefix plus a number.
    return any(
        value == c or ("[" in c and value.startswith(c.split("[")[0]) and value != c.split("[")[0])
        for c in choices
    )


def _check_text(key: str, value: Any, type_text: str, *, many: bool) -> None:
    """Text (or, where the field takes a list, texts): a number here is a mistake, or a name
    Hydra read as one, which quotes keep as text."""
    items = value if many and isinstance(value, list | tuple) else [value]
    if all(isinstance(item, str) for item in items):
        return
    raise RecipeError(
        f"`{key}` is {value!r} ({type(value).__name__}); expected {type_text}. For a name "
        f"that looks like a number, quote it: {key}='{value}'.",
        key=key,
    )


def _check_type(key: str, value: Any, type_text: str) -> None:
    """Catch the common mistakes (a word where a number goes) without re-implementing typing."""
    if value is None:
        return
    words = set(re.findall(r"[A-Za-z_]+", type_text))
    if words & {"str"} and not words & {"Any", "dict", "int", "float", "bool"}:
        _check_text(key, value, type_text, many="list" in words or "tuple" in words)
        return
    if words & {"str", "Any", "dict", "list", "tuple"}:
        return  # free-form settings: the library checks them when SFTConfig is built
    expected = words & {"int", "float", "bool"}
    if not expected:
        return
    ok = (
        ("bool" in expected and isinstance(value, bool))
        or ("int" in expected and isinstance(value, int) and not isinstance(value, bool))
        or ("float" in expected and is_number(value))
    )
    if not ok:
        raise RecipeError(
            f"`{key}` is {value!r} ({type(value).__name__}); expected {type_text}.", key=key
        )


def check_lora_keys(stage: str, lora: Mapping[str, Any]) -> None:
    """The policy's own LoRA checks, with keys named from the recipe root."""
    with stage_keys(stage, "lora"):
        validate_lora(lora)
    fields = library_fields("LoraConfig")
    for key, value in lora.items():
        if key in fields:
            check_field(f"stage.{stage}.lora.{key}", value, fields[key], "LoraConfig")


def check_quant_keys(stage: str, quant: Mapping[str, Any]) -> None:
    """The policy's own quantization checks, with keys named from the recipe root."""
    with stage_keys(stage, "quantization"):
        validate_quantization(quant)
    check_finite(f"stage.{stage}.quantization", quant)


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


# --------------------------------------------------------------------------- lora, quantization


def lora_keys() -> set[str]:
    """Keys accepted in a stage's ``lora`` mapping (LoraConfig's fields, read once per version)."""
    return set(library_fields("LoraConfig")) - ENGINE_OWNED_LORA_KEYS | ENGINE_LORA_KEYS


def validate_lora(lora: Mapping) -> None:
    """Unknown or engine-owned keys in ``lora`` -> RecipeError with did-you-mean."""
    if not isinstance(lora, Mapping):
        raise RecipeError("`lora` must be a mapping of LoraConfig keys.", key="lora")
    valid = lora_keys()
    for key in lora:
        if key == "modules_to_save":
            raise RecipeError(
                "`lora.modules_to_save` is set by the engine: every component that is neither "
                "frozen (`freeze.components`) nor in `lora.components` is trained in full. "
                "Select what trains with those keys instead.",
                key="lora.modules_to_save",
            )
        if key == "task_type" and str(lora[key]).upper() == "CAUSAL_LM":
            continue
        if key not in valid:
            raise unknown_key(f"lora.{key}", valid, "the `lora` mapping (peft.LoraConfig keys)")
    check_bounds("lora", lora, LORA_BOUNDS)


def quantization_keys() -> set[str]:
    """Keys accepted in a stage's ``quantization`` mapping (BitsAndBytesConfig's arguments,
    read once per transformers version, plus the engine's own)."""
    return set(library_fields("BitsAndBytesConfig")) | ENGINE_QUANT_KEYS


def validate_quantization(quant: Mapping) -> None:
    """Check keys and values of a ``quantization`` mapping; RecipeError on the first problem."""
    if not isinstance(quant, Mapping):
        raise RecipeError("`quantization` must be a mapping.", key="quantization")
    valid = quantization_keys()
    for key in quant:
        if key not in valid:
            raise unknown_key(f"quantization.{key}", valid, "the `quantization` mapping")
    four, eight = bool(quant.get("load_in_4bit")), bool(quant.get("load_in_8bit"))
    if four and eight:
        raise RecipeError(
            "`quantization` sets both load_in_4bit and load_in_8bit; choose one.",
            key="quantization.load_in_4bit",
        )
    if not (four or eight):
        raise RecipeError(
            "`quantization` needs `load_in_4bit: true` or `load_in_8bit: true` "
            "(or drop the mapping to train unquantized).",
            key="quantization.load_in_4bit",
        )
    ignored = sorted(set(quant) & (_ONLY_4BIT if eight else _ONLY_8BIT))
    if ignored:
        mode = "load_in_8bit" if eight else "load_in_4bit"
        raise RecipeError(
            f"`quantization.{ignored[0]}` has no effect with {mode}; remove it.",
            key=f"quantization.{ignored[0]}",
        )
    components = quant.get("components", DEFAULT_QUANT_COMPONENTS)
    validate_components(components, "quantization.components")
    if not components:
        raise RecipeError(
            "`quantization.components` is empty: nothing would be quantized.",
            key="quantization.components",
        )
    if "embeddings" in components:
        raise RecipeError(
            "`quantization.components` includes embeddings, but bitsandbytes quantizes linear "
            "layers only; embeddings keep their dtype. Remove it.",
            key="quantization.components",
        )
    on_unsupported = quant.get("on_unsupported", "error")
    if on_unsupported not in ON_UNSUPPORTED:
        raise RecipeError(
            f"`quantization.on_unsupported` must be one of {', '.join(ON_UNSUPPORTED)}, "
            f"not {on_unsupported!r}.",
            key="quantization.on_unsupported",
        )
    if quant.get("bnb_4bit_quant_type", "nf4") not in ("nf4", "fp4"):
        raise RecipeError(
            "`quantization.bnb_4bit_quant_type` must be nf4 or fp4.",
            key="quantization.bnb_4bit_quant_type",
        )
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        if key in quant and dtype_name(quant[key]) not in QUANT_DTYPES:
            raise RecipeError(
                f"`quantization.{key}` must be one of {', '.join(QUANT_DTYPES)}, "
                f"not {quant[key]!r}.",
                key=f"quantization.{key}",
            )


def dtype_name(value: Any) -> str:
    # Accept "bfloat16", "torch.bfloat16" and torch.bfloat16 alike.
    return str(value).removeprefix("torch.")
