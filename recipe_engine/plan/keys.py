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
from recipe_engine.rewards import Reward


def stage_key(
    cfg: EngineConfig, stage: StagePlan, parent: StagePlan | None, teacher: StagePlan | None = None
) -> str:
    """The stage's key, from its plan once its placement is known (a child's source is its
    parent's key; a distilling stage's teacher is hashed by its key). What is hashed is JSON:
    its keys are the keys of every stage key."""
    config = dataclasses.asdict(stage.config)
    del config["rewards"]  # hashed as planned (with their code) where a stage has any
    del config["teacher"]  # hashed by the teacher's key where a stage has one
    settings: JsonObject = {
        **config,
        "world_size": stage.placement.world_size,
        "effective_quantization": stage.placement.quantization,
        "deterministic_kernels": stage.determinism.deterministic_kernels,
        "precision": dataclasses.asdict(stage.precision),
        **_model_settings(stage.model),
        **({"eval": dataclasses.asdict(cfg.eval)} if stage.evaluate_only else {}),
        **({"rewards": [_reward_settings(r) for r in stage.rewards]} if stage.rewards else {}),
        **({"teacher": teacher.fingerprint} if teacher else {}),
    }
    return dag.fingerprint(
        settings,
        data=stage.data.identity,
        seed=cfg.seed,
        parent=parent.fingerprint if parent else None,
        init=stage.init.identity,
    )


def _reward_settings(reward: Reward) -> JsonObject:
    """What decides a reward's scores: what it calls (its module's source too), its weight and
    options; not its name in the logs."""
    return {
        "target": reward.target,
        "weight": reward.weight,
        "options": dict(reward.options),
        "source": reward.source_digest,
    }


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
