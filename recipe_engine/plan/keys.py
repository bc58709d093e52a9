"""Stage keys: what a stage's weights are a function of, hashed.

A key names a result: same source, data, settings and parent, same weights (or the manifest
says why not). What changes the weights besides the stage's own settings is hashed too: the
data-parallel world size, a quantization fallback, deterministic kernels, the dtype of each
part, the model's component layout and processor settings, and for an evaluation stage how it
generates. Every key is made with `dag.KEY_VERSION`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from recipe_engine.config.schema import EngineConfig, ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.plan import dag
from recipe_engine.plan.recipe_plan import StagePlan


def set_fingerprints(
    cfg: EngineConfig, graph: dag.StageGraph, planned: dict[str, StagePlan]
) -> None:
    """Each stage's key, set on its plan once every stage's placement is known. What is
    hashed is JSON (`JsonObject`): its keys are the keys of every stage key."""
    settings: dict[str, JsonObject] = {}
    for name, stage in planned.items():
        settings[name] = {
            **dataclasses.asdict(stage.config),
            "world_size": stage.placement.world_size,
            "effective_quantization": stage.placement.quantization,
            "deterministic_kernels": stage.determinism.deterministic_kernels,
            "precision": dataclasses.asdict(stage.precision),
            **_model_settings(stage.model),
            **({"eval": dataclasses.asdict(cfg.eval)} if stage.evaluate_only else {}),
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


def _model_settings(model: ModelConfig) -> JsonObject:
    """What the model entry decides besides its weights: the component layout that
    `freeze.components` and the other component lists select from, and the processor's
    settings (what the images become: their tokens)."""
    return {
        "layout": {"name": model.layout, "components": dict(model.components)},
        "processor": dict(model.processor),
    }


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
