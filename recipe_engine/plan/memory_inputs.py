"""What the memory estimate needs, gathered for one stage: the model's config (its folder,
the hub cache, or the snapshot shipped with the engine), the policy's parameter counts, the
trainer settings and the data's longest row. `plan.memory` does the arithmetic.

A hub model that is neither cached nor reachable is estimated from its snapshot in
`plan/model_snapshots/<org>--<name>/` (config.json and the processor's config as the hub
serves them), so `plan model=qwen2-vl-7b` prints a memory line offline.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan import memo
from recipe_engine.plan.memory import (
    CUDA_OVERHEAD_GIB,
    MemoryRequest,
    Sharding,
    StageMemory,
    estimate_memory,
    model_shape,
)
from recipe_engine.plan.models import model_location
from recipe_engine.plan.placement import PlacementPlan
from recipe_engine.plan.recipe_plan import DataPlan, PolicyPlan

SNAPSHOTS = Path(__file__).parent / "model_snapshots"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# SFTConfig's defaults for the keys the estimate reads (TRL 1.x / transformers 5.x).
DEFAULT_BATCH = 8
DEFAULT_MAX_LENGTH = 1024
DEFAULT_OPTIM = "adamw_torch_fused"
# Tokens from characters when no tokenizer is at hand: English BPE averages about four
# characters a token; a chat template adds role markers around every message.
CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS_PER_MESSAGE = 5


# --------------------------------------------------------------------------- the model


def model_files(model: ModelConfig) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(config.json, processor config) of the model: its folder, the hub cache, or the
    engine's snapshot; None when none of them has it."""
    folder = _model_folder(model)
    if folder is None or not (folder / "config.json").is_file():
        return None
    config = json.loads((folder / "config.json").read_text())
    processor: dict[str, Any] = {}
    for name in PROCESSOR_FILES:
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            processor = {**data.get("image_processor", {}), **data, **processor}
    return config, processor


def _model_folder(model: ModelConfig) -> Path | None:
    if model.source in ("tiny", "local"):
        try:
            return Path(model_location(dataclasses.asdict(model)))
        except RecipeError:
            return None
    cached = _hub_cache(model)
    return cached if cached is not None else snapshot_folder(model.id)


def _hub_cache(model: ModelConfig) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model.id, "config.json", revision=model.revision)
    return Path(found).parent if isinstance(found, str) else None


def snapshot_folder(model_id: str) -> Path | None:
    """The shipped config snapshot of a hub model id (`org/name` -> `org--name/`)."""
    folder = SNAPSHOTS / model_id.replace("/", "--")
    return folder if (folder / "config.json").is_file() else None


def snapshot_policy(name: str, stage: StageConfig, model: ModelConfig) -> PolicyPlan | None:
    """The stage's policy decided on the snapshot's meta model (a hub model's own config is
    not readable here); None without a snapshot or when the policy does not apply to it."""
    from recipe_engine.plan.policy import plan_policy

    folder = snapshot_folder(model.id)
    if folder is None:
        return None
    local = dataclasses.replace(model, source="local", id=str(folder), gguf_file=None)
    try:
        return plan_policy(name, stage, local)
    except RecipeError:
        return None


# --------------------------------------------------------------------------- the data


def row_lengths(rows: DataPlan) -> dict[str, int]:
    """The longest training row: text characters, messages and images (remembered per data)."""

    def measure() -> dict[str, int]:
        longest = {"chars": 0, "messages": 0, "images": 0, "image_pixels": 0}
        for row in rows.splits().train:
            counts = _row_counts(row)
            for key in longest:
                longest[key] = max(longest[key], counts[key])
        return longest

    inputs = {"identity": rows.identity, "kind": rows.kind, "seed": rows.seed}
    return memo.remembered("lengths", inputs, measure) or measure()


def _row_counts(row: Mapping[str, Any]) -> dict[str, int]:
    chars, messages, images, pixels = 0, 0, 0, 0
    for key, value in row.items():
        if key == "images":
            images += len(value or [])
            sizes = [getattr(image, "size", None) for image in value or []]
            pixels = max([w * h for w, h in filter(None, sizes)], default=0)
            continue
        for text, is_message, image in _walk(value):
            chars += text
            messages += is_message
            images += image
    if not messages:
        messages = sum(1 for key in ("prompt", "completion") if key in row)
    return {"chars": chars, "messages": messages, "images": images, "image_pixels": pixels}


def _walk(value: Any) -> list[tuple[int, int, int]]:
    """(characters, is-a-message, is-an-image) for every piece inside a row's field."""
    if isinstance(value, str):
        return [(len(value), 0, 0)]
    if isinstance(value, Mapping):
        if value.get("type") == "image":
            return [(0, 0, 1)]
        found = [(0, 1 if "role" in value else 0, 0)]
        for key in ("content", "text"):
            if key in value and value[key] is not None:
                found += _walk(value[key])
        return found
    if isinstance(value, list | tuple):
        return [piece for item in value for piece in _walk(item)]
    return []


# --------------------------------------------------------------------------- the stage


def stage_memory(
    stage: StageConfig,
    model: ModelConfig,
    policy: PolicyPlan,
    rows: DataPlan,
    placement: PlacementPlan | None,
    capacity_gib: float | None,
    zero_stage: int | None = None,
) -> StageMemory | None:
    """The stage's estimate on the device `placement` gives it (None: single device, not
    placed yet), or None when neither the model's config nor a snapshot is at hand."""
    files = model_files(model)
    counts = policy.param_counts
    if files is None or counts is None:
        return None
    config, processor = files
    lengths = row_lengths(rows)
    shape = model_shape(config, processor, lengths["image_pixels"])
    train = stage.train
    text, assumed = _text_tokens(train, lengths, model.kind)
    device = placement.device if placement else "cuda"
    request = MemoryRequest(
        shape=shape,
        param_counts=counts,
        trained=tuple(policy.trained),
        lora_components=tuple(policy.lora.components if policy.lora else ()),
        lora_params=policy.lora_params or 0,
        quantized_components=tuple(policy.quantization.components if policy.quantization else ()),
        quantized_params=policy.quantized_params or 0,
        bits=policy.bits,
        double_quant=bool((stage.quantization or {}).get("bnb_4bit_use_double_quant")),
        dtype=stage.dtype,
        accelerated=device != "cpu",
        batch=int(train.get("per_device_train_batch_size", DEFAULT_BATCH)),
        text_tokens=text,
        images_per_row=lengths["images"] if shape.vision else 0,
        gradient_checkpointing=stage.gradient_checkpointing,
        optim=str(train.get("optim") or DEFAULT_OPTIM),
        sharding=_sharding(placement, zero_stage),
        overhead_gib=CUDA_OVERHEAD_GIB if device == "cuda" else 0.0,
    )
    where = "cuda:0" if device == "cuda" else device
    return StageMemory(estimate_memory(request), where, capacity_gib, request, assumed)


def _text_tokens(
    train: Mapping[str, Any], lengths: Mapping[str, int], kind: str
) -> tuple[int, tuple[str, ...]]:
    """Text tokens of the longest row, capped by max_length (a batch pads to its longest)."""
    estimated = lengths["chars"] // CHARS_PER_TOKEN + TEMPLATE_TOKENS_PER_MESSAGE * max(
        lengths["messages"], 1
    )
    limit = train.get("max_length", None if kind == "vlm" else DEFAULT_MAX_LENGTH)
    tokens = min(estimated, int(limit)) if limit else estimated
    return max(tokens, 1), (f"longest row ~{estimated} text tokens",)


def _sharding(placement: PlacementPlan | None, zero_stage: int | None) -> Sharding:
    if placement is None or placement.mode == "single":
        return Sharding()
    if placement.mode == "model_parallel":
        return Sharding("model_parallel", max(len(placement.visible_gpus), 1))
    return Sharding(placement.mode, placement.world_size, zero_stage)
