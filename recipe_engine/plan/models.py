"""Model sources and classes: where a model entry's files are and which Auto class loads it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError, did_you_mean

MODEL_SOURCES = ("hub", "tiny", "local")
MODEL_KINDS = ("vlm", "causal_lm")
MODEL_DTYPES = ("float32", "bfloat16", "float16")


def check_model_entry(model: ModelConfig) -> None:
    """The model entry's own choices, before anything is looked up by them."""
    for key, value, choices in (
        ("source", model.source, MODEL_SOURCES),
        ("kind", model.kind, MODEL_KINDS),
        ("dtype", model.dtype, MODEL_DTYPES),
    ):
        if value not in choices:
            raise RecipeError(
                f"`model.{key}` is {value!r}.{did_you_mean(str(value), choices)} "
                f"Use one of: {', '.join(choices)}.",
                key=f"model.{key}",
            )
    if model.gguf_file:
        _check_gguf_entry(model)


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


def model_location(model: Mapping[str, Any]) -> str:
    """What `from_pretrained` gets: a tiny model's built folder, a GGUF file's converted
    folder (plan.gguf: converted once, cached), a local folder or a hub id."""
    if model["source"] == "tiny":
        from recipe_engine.tiny import build_tiny_model

        return str(build_tiny_model(model["id"]))
    if model.get("gguf_file"):  # .get: manifests written before GGUF entries lack the key
        from recipe_engine.plan.gguf import converted_folder

        return str(converted_folder(model))
    return str(model["id"])


def auto_model_class(kind: str) -> Any:
    import transformers

    if kind == "vlm":
        return transformers.AutoModelForImageTextToText
    if kind == "causal_lm":
        return transformers.AutoModelForCausalLM
    raise RecipeError(f"`model.kind` is {kind!r}; use vlm or causal_lm.", key="model.kind")


def load_config(model: Mapping[str, Any], local: Path | None = None) -> Any | None:
    """The model's transformers config, or None when it cannot be read (hub unreachable)."""
    from transformers import AutoConfig

    location = str(local) if local is not None else model_location(model)
    config_root = Path(location)
    if config_root.is_dir() and not (config_root / "config.json").exists():
        adapter = config_root / "adapter_config.json"
        if adapter.exists():  # a PEFT adapter folder: its base model's config decides
            import json

            from recipe_engine.plan.model_files import adapter_base_location

            base = json.loads(adapter.read_text())["base_model_name_or_path"]
            location = adapter_base_location(config_root, base)
    try:
        return AutoConfig.from_pretrained(
            location,
            revision=model.get("revision"),
            trust_remote_code=bool(model.get("trust_remote_code")),
        )
    except OSError:
        if model["source"] == "hub" and local is None:
            return None
        raise RecipeError(
            f"No model config found at {location}: it is not a save_pretrained folder "
            "(config.json missing). Point the path at a folder a stage or save_pretrained wrote.",
            key="model.id",
        ) from None


def meta_model(config: Any, kind: str, dtype: str | None = None) -> Any:
    """The model built from its config on the meta device: module names, no weights."""
    import torch

    with torch.device("meta"):
        if dtype is None:
            return auto_model_class(kind).from_config(config)
        return auto_model_class(kind).from_config(config, dtype=getattr(torch, dtype))
