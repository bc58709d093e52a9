"""Config -> `RecipePlan`: refuse what the recipe gets wrong, resolve its inputs, decide, and
let the libraries judge the decided settings. Every verb that plans goes through here.
"""

from __future__ import annotations

from omegaconf import DictConfig

from recipe_engine.config.compose import to_engine_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.plan.planner import check_recipe, plan_recipe
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.resolver import resolve_recipe
from recipe_engine.run.preflight import check_with_libraries


def plan_from_config(cfg: DictConfig | EngineConfig, machine: Machine | None = None) -> RecipePlan:
    config = cfg if isinstance(cfg, EngineConfig) else to_engine_config(cfg)
    graph = check_recipe(config)  # the recipe alone: nothing is read before it passes
    parents = {name: graph.parents[name] for name in graph.order}
    plan = plan_recipe(config, graph, resolve_recipe(config, parents, machine))
    check_with_libraries(list(plan.stages.values()))
    return plan
