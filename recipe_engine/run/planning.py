"""Config -> `RecipePlan`: refuse what the recipe gets wrong, resolve its inputs, decide, and
let the libraries judge the decided settings. Every verb that plans goes through here.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig

from recipe_engine.config.compose import to_engine_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.kinds import Partition
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.jobs import plan_jobs
from recipe_engine.plan.planner import check_recipe, plan_recipe
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.resolver import resolve_recipe
from recipe_engine.run.preflight import check_with_libraries, judge_at_first_read
from recipe_engine.run.submission import stage_code
from recipe_engine.store.store import Store


def plan_from_config(
    cfg: DictConfig | EngineConfig,
    machine: Machine | None = None,
    partition: Partition | None = None,
) -> RecipePlan:
    """The plan; with a launcher that has a scheduler its stage jobs too, sized for
    `partition` (default: what the scheduler offers, read from it, its nodes then asked
    whether they can run the stages)."""
    config = cfg if isinstance(cfg, EngineConfig) else to_engine_config(cfg)
    graph = check_recipe(config)  # the recipe alone: nothing is read before it passes
    parents = {name: graph.parents[name] for name in graph.order}
    # The libraries' judge imports for seconds: started at the first read, it imports while
    # models and rows are read (a warm plan reads nothing and starts none), and once asked
    # it is kept for this process's next plans.
    with judge_at_first_read():
        plan = plan_recipe(config, graph, resolve_recipe(config, parents, machine))
        check_with_libraries(list(plan.stages.values()))
    kind = launcher_kind(config.launcher)
    if kind.scheduled:
        read_here = partition is None  # else a caller describes the nodes: none to ask
        partition = partition or kind.read_partition(config)
        plan = dataclasses.replace(plan, jobs=plan_jobs(plan, partition, _stored(plan)))
        if read_here:
            kind.check_nodes(config, stage_code(plan, list(plan.jobs)))
    return plan


def _stored(plan: RecipePlan) -> set[str]:
    """Stages a submission leaves out: those the store holds (unless forced), and those `only`
    does not name."""
    store, config = Store(plan.config.output_root), plan.config
    return {
        name
        for name, stage in plan.stages.items()
        if (store.is_complete(stage.fingerprint) and name not in config.force)
        or (config.only and name not in config.only)
    }
