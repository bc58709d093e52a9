"""Stage keys: what a stage's weights are a function of, hashed.

A key names a result: same source, data, settings and parent, same weights (or the manifest
says why not). What changes the weights besides the stage's own settings is hashed too: the
data-parallel world size, a quantization fallback, how random draws are made, a declared
component layout, and for an evaluation stage how it generates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from recipe_engine.config.schema import EngineConfig, ModelConfig
from recipe_engine.config.trainers import SFT
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.plan import dag
from recipe_engine.plan.recipe_plan import StagePlan


def set_fingerprints(
    cfg: EngineConfig, graph: dag.StageGraph, planned: dict[str, StagePlan]
) -> None:
    """Each stage's key, set on its plan once every stage's placement is known. What is
    hashed is JSON (`JsonObject`): its keys are the keys of every stage key so far."""
    settings: dict[str, JsonObject] = {}
    for name, stage in planned.items():
        settings[name] = {
            **_stage_settings(stage),
            "world_size": stage.placement.world_size,
            "effective_quantization": stage.placement.quantization,
            **({"eval": dataclasses.asdict(cfg.eval)} if stage.evaluate_only else {}),
            **_declared_layout(stage.model),
            **_processor_settings(stage.model),
            **_randomness(stage),
            **_held_precision(stage),
        }
    fingerprints = dag.fingerprints(
        graph,
        settings,
        source_identity={n: s.init.identity for n, s in planned.items()},
        data_identity={n: s.data.identity for n, s in planned.items()},
        seed=cfg.seed,
    )
    _check_duplicates(fingerprints)
    for name, fingerprint in fingerprints.items():
        planned[name].fingerprint = fingerprint


def _stage_settings(stage: StagePlan) -> JsonObject:
    """The stage's own settings; the default trainer (sft) is left out, so the keys of every
    stage from before trainers were a choice stay as they were."""
    settings = dataclasses.asdict(stage.config)
    if settings.get("trainer") == SFT:
        del settings["trainer"]
    return settings


def _randomness(stage: StagePlan) -> JsonObject:
    """How a stage's random draws are made, where that changed what its key trains to.

    LoRA adapters were initialised from an unseeded generator until the engine seeded them
    (right before the policies): such a key named no single result, so LoRA stages (and their
    children) got new keys. Deterministic CUDA kernels compute other weights than the fast
    ones, so asking for them is part of the key (default keys stay as they were).
    """
    seeded = {"lora_init": "seeded"} if stage.config.lora else {}
    kernels = {"deterministic_kernels": True} if stage.determinism.deterministic_kernels else {}
    # Until the preflight ran in train mode, its no-grad forward in eval mode had bitsandbytes
    # repack a 4-bit stage's weights for CPU inference (on CPUs with AVX512-BF16), and the
    # stage then trained through that inference kernel: other weights than the training
    # kernel gives. Such keys named another result, so 4-bit stages got new keys.
    kbit = {"kbit_kernels": "training"} if stage.placement.quantization == "4bit" else {}
    return {**seeded, **kernels, **kbit}


def _held_precision(stage: StagePlan) -> JsonObject:
    """A k-bit stage in half precision held its unquantized weights in float32 (PEFT's
    upcast) and its trained ones in bfloat16 (TRL's cast) until the plan decided every dtype
    (`plan.precision`): such keys named another result, so those stages got new keys. Float32
    stages hold what they held (their keys stay)."""
    if stage.precision.quantized is None or stage.precision.weights == "float32":
        return {}
    return {"precision": dataclasses.asdict(stage.precision)}


def _declared_layout(model: ModelConfig) -> JsonObject:
    """A layout the model entry names or declares decides what `freeze.components` and the
    other component lists select, so it is hashed; the built-in default is not (keys stay)."""
    if model.layout is None and not model.components:
        return {}
    return {"layout": {"name": model.layout, "components": dict(model.components)}}


def _processor_settings(model: ModelConfig) -> JsonObject:
    """The model entry's processor settings decide what the images become (their tokens), so
    they are hashed where set; the processor's saved config alone keeps the keys there were."""
    return {"processor": dict(model.processor)} if model.processor else {}


def _check_duplicates(fingerprints: Mapping[str, str]) -> None:
    seen: dict[str, str] = {}
    for name, fp in fingerprints.items():
        if fp in seen:
            raise RecipeError(
                f"Stages `{seen[fp]}` and `{name}` are duplicates: same source, data and "
                "settings, so they would train identical weights. Remove one or change its "
                "settings.",
                key=f"stage.{name}",
            )
        seen[fp] = name
