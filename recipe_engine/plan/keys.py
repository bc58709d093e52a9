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
from recipe_engine.plugins import code_of
from recipe_engine.trainers import known_capabilities


def stage_key(cfg: EngineConfig, stage: StagePlan, parent: StagePlan | None) -> str:
    """The stage's key, from its plan once its placement is known (a child's source is its
    parent's key). What its kind's capabilities add is hashed as they planned it (its rewards
    with their code, its teacher by its key), not as their config sections name it. What is
    hashed is JSON: its keys are the keys of every stage key."""
    config = dataclasses.asdict(stage.config)
    for capability in known_capabilities():
        for section in capability.sections:
            del config[section]
    settings: JsonObject = {
        **config,
        "world_size": stage.placement.world_size,
        "effective_quantization": stage.placement.quantization,
        "deterministic_kernels": stage.determinism.deterministic_kernels,
        "precision": dataclasses.asdict(stage.precision),
        **_model_settings(stage.model),
        **({"eval": dataclasses.asdict(cfg.eval)} if stage.evaluate_only else {}),
        **{part: value for added in stage.added for part, value in added.key.items()},
        **_plugin_code(stage),
    }
    return dag.fingerprint(
        settings,
        data=stage.data.identity,
        seed=cfg.seed,
        parent=parent.fingerprint if parent else None,
        init=stage.init.identity,
    )


def _plugin_code(stage: StagePlan) -> JsonObject:
    """The source of the plug-ins the stage trains with (its trainer kind, its rows' format),
    where it trains with any: an edited plug-in is a new key (`plugins`)."""
    used = {
        "trainers": code_of("trainers", stage.config.trainer),
        "formats": code_of("formats", stage.data.source),
    }
    found = {group: digest for group, digest in used.items() if digest is not None}
    return {"plugins": found} if found else {}


def _model_settings(model: ModelConfig) -> JsonObject:
    """What the model entry decides besides its weights: the component layout that
    `freeze.components` and the other component lists select from, and the processor's
    settings (what the images become: their tokens)."""
    return {
        "layout": {"name": model.layout, "components": dict(model.components)},
        "processor": dict(model.processor),
    }


def check_duplicates(fingerprints: Mapping[str, str]) -> None:
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
