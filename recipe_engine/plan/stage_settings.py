"""A recipe's stage settings as the planner reads them: `dtype: auto` resolved, and what the
settings alone get wrong (a dtype, a component, a library key, a stage name) refused before
anything is read."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from recipe_engine.config import library_keys
from recipe_engine.config.choices import Dtype
from recipe_engine.config.components import validate_components
from recipe_engine.config.schema import (
    EngineConfig,
    ModelConfig,
    StageConfig,
    without_empty_sections,
)
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.trainers import trainer_kinds

# What a model entry's `dtype: auto` computes in where nothing turns it to float32.
PREFERRED = Dtype.bfloat16


def resolved_stages(cfg: EngineConfig) -> dict[str, StageConfig]:
    return {name: resolve_dtypes(stage, cfg.model) for name, stage in cfg.stage.items()}


def resolve_dtypes(stage: StageConfig, model: ModelConfig) -> StageConfig:
    """`dtype: auto` means the model entry's dtype (an entry's own auto: `PREFERRED`, which
    `plan` may turn to float32 on a CPU that emulates it), `bnb_4bit_compute_dtype: auto` the
    stage's.

    Resolved before fingerprinting, so changing the model entry's dtype retrains the stage.
    """
    asked = asked_dtype(stage, model)
    return with_dtype(without_empty_sections(stage), stage, PREFERRED if asked == "auto" else asked)


def asked_dtype(stage: StageConfig, model: ModelConfig) -> str:
    """The dtype the recipe asks of a stage: its own, else its model entry's (auto: neither
    names one)."""
    return str(model.dtype if stage.dtype == "auto" else stage.dtype)


def with_dtype(stage: StageConfig, asked: StageConfig, dtype: str) -> StageConfig:
    """`stage` computing in `dtype`, and its quantized modules too where `asked` (the stage as
    the recipe gives it) leaves their compute dtype at auto; empty sections as they are."""
    quant = stage.quantization
    if quant and (asked.quantization or {}).get("bnb_4bit_compute_dtype") == "auto":
        quant = {**quant, "bnb_4bit_compute_dtype": dtype}
    return dataclasses.replace(stage, dtype=dtype, quantization=quant)


def check_stage_settings(name: str, stage: StageConfig) -> None:
    validate_components(stage.freeze.components, f"stage.{name}.freeze.components")
    kinds = trainer_kinds(stage.trainer, name)
    library_keys.check_train_for_one_of(name, stage.train, [k.settings_class for k in kinds])
    if stage.lora:
        library_keys.check_lora_keys(name, stage.lora)
        validate_components(stage.lora.get("components", []), f"stage.{name}.lora.components")
    if stage.quantization:
        validate_components(
            stage.quantization.get("components", []), f"stage.{name}.quantization.components"
        )
        library_keys.check_quant_keys(name, stage.quantization)


def check_stage_name(name: str, stages: Mapping[str, Any], key: str) -> None:
    if name not in stages:
        raise RecipeError(
            f"`{key}` names `{name}`, which is not a stage of this recipe."
            f"{did_you_mean(name, stages)} Stages: {', '.join(stages)}.",
            key=key,
        )
