"""A scheduled launcher's jobs (`launcher=` one with a scheduler): what each stage the store
lacks needs of a node, from its placement and memory estimate, sized into its job by the
launcher (`launchers.kinds`).

Pure, like the rest of `plan`: the scheduler's partition and which stages the store already
holds come in as data. A stage in the store is not submitted; a child waits for its parent's
job, or for nothing when its parent is stored.
"""

from __future__ import annotations

from recipe_engine.launchers.kinds import Partition, StageJob, StageNeeds
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan

# A training process's host memory besides the model (Python, torch, the libraries, the data).
PROCESS_HOST_GIB = 2.0


def plan_jobs(plan: RecipePlan, partition: Partition, stored: set[str]) -> dict[str, StageJob]:
    """A job for every stage of the plan the store does not hold, in graph order, sized by
    the launcher whose scheduler offers `partition`."""
    kind = launcher_kind(partition.scheduler)
    return kind.size_jobs(stage_needs(plan, stored), plan.config, partition)


def stage_needs(plan: RecipePlan, stored: set[str]) -> list[StageNeeds]:
    """What every stage the store does not hold needs of each node, in graph order."""
    needs: list[StageNeeds] = []
    for name in plan.graph.order:
        if name in stored:
            continue
        stage = plan.stages[name]
        placement = stage.placement
        per_node = max(placement.nproc if placement.starter != "none" else 1, 1)
        pending = {n.stage for n in needs}  # the jobs of the stages it loads, if any
        after = tuple(s for s in plan.graph.inputs(name) if s in pending)
        on_gpu = placement.device == "cuda"
        needs.append(StageNeeds(name, per_node, on_gpu, _host_gib(stage, per_node), after))
    return needs


def _host_gib(stage: StagePlan, per_node: int) -> float:
    """Host memory per node: each process's runtime, and on CPU its share of the estimate
    (a GPU stage's weights pass through host memory while they load)."""
    if stage.memory is None:
        return per_node * (PROCESS_HOST_GIB + 2.0)
    estimate = stage.memory.estimate
    held = estimate.peak if stage.placement.device == "cpu" else estimate.weights
    return per_node * (PROCESS_HOST_GIB + held)
