"""A model's parameters and modules as plain data: what the policies decide on.

`plan` never holds a torch model: `resolve` builds the model on the meta device from its
config (no weights), reads its parameters and modules into a `ModelInventory`, and caches
that by the config's content. `run` reads the loaded model the same way, so the planner's
policy functions run unchanged against what was actually loaded.

Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig
from recipe_engine.files import JsonObject

# Module kinds: "linear" layers get LoRA adapters by default and are what bitsandbytes
# replaces (nn.Linear, GPT-2's Conv1D; bitsandbytes' k-bit layers subclass nn.Linear);
# "adaptable" ones LoRA wraps only when named (embeddings, convolutions).
LINEAR, ADAPTABLE, OTHER = "linear", "adaptable", "other"


@dataclass(frozen=True)
class Parameter:
    name: str  # as named_parameters(remove_duplicate=False) names it: tied weights twice
    numel: int
    tensor: int  # the same number for every name of one tensor (tied weights)


@dataclass(frozen=True)
class Module:
    name: str
    kind: str  # LINEAR | ADAPTABLE | OTHER
    class_name: str
    # As peft reads them for LoRA's A and B (tuners_utils._get_in_out_features): a linear
    # layer's features, GPT-2 Conv1D's weight shape (in, out), an embedding's
    # (num_embeddings, embedding_dim), a convolution's channels; 0 for other modules.
    in_features: int = 0
    out_features: int = 0
    weight_numel: int = 0


@dataclass(frozen=True)
class ModelInventory:
    """Every parameter and module of a model, by name, in the model's own order."""

    model_type: str
    parameters: tuple[Parameter, ...]
    modules: tuple[Module, ...]  # the root module (name "") left out

    def parameter_names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def module_names(self) -> list[str]:
        return [m.name for m in self.modules]

    def names_of(self, *kinds: str) -> list[str]:
        return [m.name for m in self.modules if m.kind in kinds]

    def module(self, name: str) -> Module:
        for module in self.modules:
            if module.name == name:
                return module
        raise KeyError(f"{self.model_type} model has no module {name!r}")

    def to_dict(self) -> JsonObject:  # the cache's "inventory" record
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelInventory:
        return cls(
            model_type=data["model_type"],
            parameters=tuple(Parameter(**p) for p in data["parameters"]),
            modules=tuple(Module(**m) for m in data["modules"]),
        )


def inventory_of(model: Any) -> ModelInventory:
    """A torch model's inventory (on the meta device, or loaded)."""
    tensors: dict[int, int] = {}
    parameters = tuple(
        Parameter(name, param.numel(), tensors.setdefault(id(param), len(tensors)))
        for name, param in model.named_parameters(remove_duplicate=False)
    )
    modules = tuple(_module(name, module) for name, module in model.named_modules() if name)
    return ModelInventory(str(model.config.model_type), parameters, modules)


def _module(name: str, module: Any) -> Module:
    import torch
    from transformers.pytorch_utils import Conv1D

    weight = getattr(module, "weight", None)
    weight_numel = int(weight.numel()) if isinstance(weight, torch.Tensor) else 0
    convolutions = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    if isinstance(module, torch.nn.Linear):  # bitsandbytes' Linear4bit / Linear8bitLt too
        features = (int(module.in_features), int(module.out_features))
        return Module(name, LINEAR, type(module).__name__, *features, weight_numel)
    if isinstance(module, Conv1D):  # GPT-2's transposed linear: weight (in, out)
        features = tuple(int(n) for n in module.weight.shape)
        return Module(name, LINEAR, type(module).__name__, *features, weight_numel)
    if isinstance(module, torch.nn.Embedding):
        features = (int(module.num_embeddings), int(module.embedding_dim))
        return Module(name, ADAPTABLE, type(module).__name__, *features, weight_numel)
    if isinstance(module, convolutions):
        features = (int(module.in_channels), int(module.out_channels))
        return Module(name, ADAPTABLE, type(module).__name__, *features, weight_numel)
    return Module(name, OTHER, type(module).__name__, weight_numel=weight_numel)


def meta_inventory(config: Any, kind: str) -> ModelInventory:
    """The inventory of the model a transformers config describes, built on the meta device."""
    from recipe_engine.resolve.models import meta_model

    return inventory_of(meta_model(config, kind))


def model_inventory(model: ModelConfig, location: str | None = None) -> ModelInventory | None:
    """The inventory of a model entry (at `location` when given: a folder, a hub id); None
    when its config cannot be read here (a hub model offline)."""
    from recipe_engine.resolve.models import load_config

    local = Path(location) if location and Path(location).is_dir() else None
    config = load_config(model, local)
    return meta_inventory(config, model.kind) if config is not None else None


def quantized_modules(model: Any) -> list[str]:
    """Names of the bitsandbytes 4-bit/8-bit layers in a loaded model."""
    try:
        import bitsandbytes as bnb

        kinds: tuple[type, ...] = (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    except ImportError:  # No bitsandbytes: nothing can be quantized by it.
        return []
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]
