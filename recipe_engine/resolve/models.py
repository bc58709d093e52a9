"""Where a model entry's files are, its transformers config, and which Auto class loads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError


def model_location(model: ModelConfig) -> str:
    """What `from_pretrained` gets: a tiny model's built folder, a GGUF file's converted
    folder (plan.gguf: converted once, cached), a local folder or a hub id."""
    if model.source == "tiny":
        from recipe_engine.resolve.tiny import build_tiny_model

        return str(build_tiny_model(model.id))
    if model.gguf_file:
        from recipe_engine.resolve.gguf import converted_folder

        return str(converted_folder(model))
    return str(model.id)


def auto_model_class(kind: str) -> Any:
    import transformers

    if kind == "vlm":
        return transformers.AutoModelForImageTextToText
    if kind == "causal_lm":
        return transformers.AutoModelForCausalLM
    raise RecipeError(f"`model.kind` is {kind!r}; use vlm or causal_lm.", key="model.kind")


def load_config(model: ModelConfig, local: Path | None = None) -> Any | None:
    """The model's transformers config, or None when it cannot be read (hub unreachable)."""
    from transformers import AutoConfig

    location = str(local) if local is not None else model_location(model)
    config_root = Path(location)
    if config_root.is_dir() and not (config_root / "config.json").exists():
        adapter = config_root / "adapter_config.json"
        if adapter.exists():  # a PEFT adapter folder: its base model's config decides
            import json

            from recipe_engine.resolve.model_files import adapter_base_location

            base = json.loads(adapter.read_text())["base_model_name_or_path"]
            location = adapter_base_location(config_root, base)
    try:
        return AutoConfig.from_pretrained(
            location,
            revision=model.revision,
            trust_remote_code=model.trust_remote_code,
        )
    except OSError:
        if model.source == "hub" and local is None:
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
