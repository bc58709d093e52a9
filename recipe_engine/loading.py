"""Resolve a stage's init and load it: hub id | local path | parent stage output.

Handoff rules: a full-weights parent loads directly and the child quantizes on load if it
asks to; an adapter parent is first merged into its base in the compute dtype (never into
a 4-bit model) and saved, then the child loads the merged weights. Afterwards every
parameter trained upstream is checked against the parent's recorded checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recipe_engine.errors import RecipeError
from recipe_engine.modeling import auto_model_class

MANIFEST = "manifest.json"
HANDOFF = "handoff.json"


class HandoffError(RuntimeError):
    """A parameter trained upstream did not arrive downstream: the engine stops the recipe."""


@dataclass
class LoadedModel:
    model: Any
    processor: Any  # a ProcessorMixin for VLMs, a tokenizer for causal LMs
    location: str  # what the weights were loaded from
    base_location: str  # the full-weights model a PEFT adapter of this stage applies to


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def is_adapter_folder(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def load_processor(location: str, kind: str, model_entry: dict[str, Any]) -> Any:
    from transformers import AutoProcessor, AutoTokenizer

    cls = AutoProcessor if kind == "vlm" else AutoTokenizer
    return cls.from_pretrained(
        location,
        revision=model_entry.get("revision"),
        trust_remote_code=bool(model_entry.get("trust_remote_code")),
    )


def load_pretrained(
    location: str,
    model_entry: dict[str, Any],
    *,
    dtype: str,
    device_map: Any,
    quantization_config: Any = None,
) -> Any:
    """`from_pretrained` with the engine's safety defaults (no remote code, safetensors only)."""
    cls = auto_model_class(model_entry["kind"])
    try:
        return cls.from_pretrained(
            location,
            revision=model_entry.get("revision"),
            dtype=torch_dtype(dtype),
            device_map=device_map,
            quantization_config=quantization_config,
            trust_remote_code=bool(model_entry.get("trust_remote_code")),
            use_safetensors=None if model_entry.get("allow_pickle") else True,
        )
    except OSError as error:
        hint = (
            " Only safetensors weights are loaded; if you trust this checkpoint's pickle files "
            "set model.allow_pickle=true."
            if "safetensors" in str(error)
            else ""
        )
        raise RecipeError(
            f"Could not load a model from {location}: {str(error).splitlines()[0]}{hint}",
            key="model.id",
        ) from None


def merge_adapter_parent(parent: Path, dtype: str, into: Path) -> tuple[Path, dict]:
    """Merge a parent stage's LoRA adapter into its base in the compute dtype and save it.

    The merged folder is kept (it is the base a child adapter applies to) and reused by
    later children; `handoff.json` beside the weights holds the checksums of every weight
    the adapter changed. Written aside and renamed into place, like a stage output.
    """
    record = into / HANDOFF
    if record.is_file():
        return into, json.loads(record.read_text())
    from peft import PeftModel

    manifest = read_manifest(parent)
    base_location = manifest["base_location"]
    entry = manifest["model_entry"]
    base = load_pretrained(base_location, entry, dtype=dtype, device_map={"": "cpu"})
    merged = PeftModel.from_pretrained(base, str(parent)).merge_and_unload()
    expected = handoff_checksums(merged, manifest["trained_parameters"])
    tmp = into.with_name(f".{into.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp, safe_serialization=True)
    load_processor(str(parent), entry["kind"], entry).save_pretrained(tmp)
    (tmp / HANDOFF).write_text(json.dumps(expected))
    try:
        os.rename(tmp, into)
    except OSError:  # another process merged it first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return into, expected


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        raise RecipeError(
            f"{folder} has no {MANIFEST}: it is not a completed stage output. Rerun the stage "
            "that writes it.",
        )
    return json.loads(path.read_text())


def is_quantized_param(param: torch.nn.Parameter) -> bool:
    return type(param).__name__ in ("Params4bit", "Int8Params")


CHECKSUM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def tensor_checksum(tensor: torch.Tensor, dtype: torch.dtype) -> str:
    data = tensor.detach().to("cpu", dtype).contiguous().flatten().view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


def handoff_checksums(model: Any, names: list[str]) -> dict[str, dict[str, str]]:
    """Checksums of the named parameters as a child will load them, in each float dtype.

    Recorded by runtime parameter name: transformers may rename keys on save, so the
    child compares what it loaded, not the file's keys.
    """
    params = dict(model.named_parameters())
    return {
        name: {str(d): tensor_checksum(params[name], d) for d in CHECKSUM_DTYPES}
        for name in names
        if name in params
    }


def check_handoff(model: Any, expected: dict[str, dict[str, str]], parent: str) -> dict[str, int]:
    """Every parameter the parent trained arrived here with the parent's values.

    Parameters the child quantizes on load are checked for presence only (4/8-bit storage
    changes their bytes by design). Returns counts for the manifest.
    """
    params = dict(model.named_parameters())
    missing = [name for name in expected if name not in params]
    if missing:
        raise HandoffError(
            f"{len(missing)} parameter(s) trained in stage `{parent}` are missing after loading "
            f"its output, e.g. {missing[:3]}. The parent's output is incomplete or the model "
            "class dropped them."
        )
    changed, quantized = [], 0
    for name, sums in expected.items():
        param = params[name]
        if is_quantized_param(param):
            quantized += 1
        elif tensor_checksum(param, param.dtype) != sums.get(str(param.dtype)):
            changed.append(name)
    if changed:
        raise HandoffError(
            f"{len(changed)} parameter(s) trained in stage `{parent}` did not arrive with the "
            f"values it saved, e.g. {changed[:3]}. The handoff lost the parent's training."
        )
    return {"checked": len(expected) - quantized, "quantized_on_load": quantized}
