"""Config -> `RecipePlan`: refuse what the recipe gets wrong, resolve its inputs, decide, and
let the libraries judge the decided settings. Every verb that plans goes through here.
"""

from __future__ import annotations

from omegaconf import DictConfig

from recipe_engine.config.compose import to_engine_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.config.trainers import TRAINERS, UNPAIRED_ROWS
from recipe_engine.plan.feedback import LabelCounts, check_labels
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
    check_feedback_labels(plan)
    check_with_libraries(list(plan.stages.values()))
    return plan


def check_feedback_labels(plan: RecipePlan) -> None:
    """A stage learning from unpaired feedback (KTO) has rows labelled both ways
    (`plan.feedback.check_labels`). The survey of rows (`resolve`) does not count labels yet,
    so they are counted here from the training split, which the run reads anyway."""
    for stage in plan.stages.values():
        kind = TRAINERS[stage.config.trainer]
        if stage.config.evaluate_only or kind.rows != UNPAIRED_ROWS:
            continue
        labels = [bool(label) for label in stage.data.splits().train["label"]]
        counts = LabelCounts(sum(labels), len(labels) - sum(labels))
        check_labels(stage.name, stage.config, stage.data.describe(), counts)
