"""Recipe + its resolved inputs -> `RecipePlan`: every stage decided before weights load.

Pure: the inputs (`resolve.inputs.RecipeInputs`) hold everything read from the world, so
this module reads no file, asks no hub and imports no torch. `check_recipe` refuses what the
recipe alone gets wrong (before anything is read); `plan_recipe` plans the stages in graph
order, each through one pipeline of steps (`plan.pipeline.STEPS`, in order, each once), then
its key.
"""

from __future__ import annotations

import dataclasses

from recipe_engine.config.bounds import check_engine_values
from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.registry import check_launch
from recipe_engine.plan import dag
from recipe_engine.plan.keys import check_duplicates
from recipe_engine.plan.pipeline import STEPS, Draft, check_capability_settings
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.plan.stage_context import StageContext
from recipe_engine.plan.stage_settings import (
    check_stage_name,
    check_stage_settings,
    resolved_stages,
)
from recipe_engine.resolve.inputs import RecipeInputs, Rows
from recipe_engine.resolve.sources import check_model_entry


def check_recipe(cfg: EngineConfig) -> dag.StageGraph:
    """What the recipe alone gets wrong, refused before anything is read; its stage graph."""
    check_engine_values(cfg.seed, dataclasses.asdict(cfg.eval))
    check_model_entry(cfg.model)
    check_launch(cfg)
    stages = resolved_stages(cfg)
    for name, stage in stages.items():
        check_stage_settings(name, stage)
        check_capability_settings(name, stage)
    graph = dag.build_graph(
        {n: dataclasses.asdict(s) for n, s in stages.items()}, cfg.recipe.targets
    )
    for key, names in (("only", cfg.only), ("force", cfg.force)):
        for name in names:
            check_stage_name(name, stages, key)
    return graph


def plan_recipe(cfg: EngineConfig, graph: dag.StageGraph, inputs: RecipeInputs) -> RecipePlan:
    stages = resolved_stages(cfg)
    planned: dict[str, StagePlan] = {}
    shared: dict[tuple[str, str], Rows] = {}  # rows read one way, shared by the stages
    for name in graph.order:
        extra = graph.extra.get(name, {})
        loaded = {role: planned[stage] for role, stage in extra.items()}
        files = {role: inputs.stages[stage].model.files for role, stage in extra.items()}
        context = StageContext(
            cfg, inputs.machine, name, stages[name], inputs.stages[name], loaded, files
        )
        parent = planned[graph.parents[name]] if graph.parents[name] else None
        draft = Draft(context, parent, tuple(graph.children(name)), shared)
        for step in STEPS:
            draft = step(draft)
        planned[name] = draft.planned()
    check_duplicates({name: stage.fingerprint for name, stage in planned.items()})
    return RecipePlan(cfg.recipe.name, cfg, graph, planned, inputs.machine, cfg.hardware.name)
