"""`launcher=ray`: each stage's tasks sized from what the stage needs of a node, and checked
against the cluster's nodes. Pure: the nodes (`cluster.read_partition`) come in as data.

A stage on several nodes is one placement group of one bundle per node, spread over distinct
nodes; it is refused here unless that many nodes can each hold a bundle, since a placement
group that can never be placed waits forever (and a process group that waits for a node
that never comes hangs).
"""

from __future__ import annotations

import dataclasses
import math

from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import (
    NodeOffer,
    Partition,
    StageJob,
    StageNeeds,
    default_cpus,
)


def check_keys(cfg: EngineConfig) -> None:
    """`ray.*` values that cannot work on any cluster, before anything is read."""
    ray = cfg.ray
    if ray.num_cpus is not None and ray.num_cpus < 1:
        raise RecipeError("`ray.num_cpus` must be 1 or more (or unset).", key="ray.num_cpus")
    if ray.mem_gb is not None and ray.mem_gb <= 0:
        raise RecipeError("`ray.mem_gb` must be above 0 (or unset).", key="ray.mem_gb")
    if ray.max_retries < 0:
        raise RecipeError("`ray.max_retries` must be 0 or more.", key="ray.max_retries")
    if ray.placement_timeout_s < 1:
        raise RecipeError(
            "`ray.placement_timeout_s` must be 1 or more: how long a stage waits for its nodes.",
            key="ray.placement_timeout_s",
        )


def stage_job(needs: StageNeeds, cfg: EngineConfig, partition: Partition) -> StageJob:
    """One stage's tasks: what each of its nodes holds, checked against the cluster."""
    per_node = needs.processes_per_node
    gpus = per_node if needs.on_gpu else 0
    job = StageJob(
        stage=needs.stage,
        nodes=cfg.nodes,
        processes_per_node=per_node,
        gpus_per_node=gpus,
        cpus_per_node=cfg.ray.num_cpus or default_cpus(gpus, per_node),
        mem_gb=math.ceil(cfg.ray.mem_gb or needs.host_gib),
        time_min=None,
        pool=partition.name,
        after=needs.after,
    )
    _check_fits(job, partition)
    return dataclasses.replace(job, detail=_detail(job))


def threads_per_process(job: StageJob) -> int:
    """Each process's share of its node's CPUs, as its torch threads (OMP_NUM_THREADS): Ray
    would give each the node's whole count, and torchrun keeps a count it finds set."""
    return max(1, job.cpus_per_node // job.processes_per_node)


def _detail(job: StageJob) -> str:
    spread = "; one task per node, spread over distinct nodes" if job.nodes > 1 else ""
    threads = threads_per_process(job)
    return f"{spread}; {threads} torch thread(s) per process (its share of the CPUs)"


def holds(node: NodeOffer, job: StageJob) -> bool:
    return (
        node.cpus >= job.cpus_per_node
        and node.gpus >= job.gpus_per_node
        and node.memory_mb >= job.mem_gb * 1000
    )


def _check_fits(job: StageJob, partition: Partition) -> None:
    """Refused unless `job.nodes` of the cluster's nodes can each hold one node's share."""
    holding = [node for node in partition.nodes if holds(node, job)]
    if len(holding) >= job.nodes:
        return
    gpus = f", {job.gpus_per_node} GPU(s)" if job.gpus_per_node else ""
    needs = f"{job.cpus_per_node} CPU(s){gpus} and {job.mem_gb} GB of memory on a node"
    largest = partition.largest()
    if not holding:
        biggest = largest.describe() if largest else "none: it has no node that runs tasks"
        raise RecipeError(
            f"Stage `{job.stage}` needs {needs}, but no node of {partition.name} can hold "
            f"that; its largest is {biggest}. {_fix(job, largest)}",
            key=_key(job, largest),
        )
    raise RecipeError(
        f"Stage `{job.stage}` runs on {job.nodes} nodes (`nodes={job.nodes}`) and needs {needs}, "
        f"but only {len(holding)} node(s) of {partition.name} can hold that "
        f"({', '.join(node.name for node in holding)}): it would wait for the others forever. "
        f"Set `nodes={len(holding)}` or fewer, or add nodes.",
        key="nodes",
    )


def _key(job: StageJob, largest: NodeOffer | None) -> str:
    """The key whose value asks for what no node has."""
    if largest is None or job.gpus_per_node > largest.gpus:
        return "device"
    if job.cpus_per_node > largest.cpus:
        return "ray.num_cpus"
    return "ray.mem_gb"


def _fix(job: StageJob, largest: NodeOffer | None) -> str:
    key = _key(job, largest)
    if key == "device":
        return "Use `device=cpu`, fewer processes (`nproc`), or a cluster with GPU nodes."
    if key == "ray.num_cpus":
        return f"Set `ray.num_cpus={largest.cpus if largest else 1}` or fewer, or add a node."
    return "Set `ray.mem_gb` to what a node has, or add a node with more memory."
