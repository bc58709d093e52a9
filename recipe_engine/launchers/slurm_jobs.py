"""`launcher=slurm`: each stage's SLURM job, sized from what the stage needs of a node.

Pure: the partition (`slurm_cluster.read_partition`, read from `sinfo`) comes in as data, and
what each stage needs (`kinds.StageNeeds`) from its placement. What the partition cannot give
is refused here, naming the key that asked for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import Partition, StageJob, StageNeeds, default_cpus

# A multi-node stage's rendezvous port without slurm.master_port: 20000 + job id mod 20000,
# one per job id, so jobs sharing a node differ.
PORT_BASE, PORT_SPAN = 20000, 20000
TIME = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+)(?::(\d+))?$")


def time_minutes(text: str) -> int:
    """sbatch's --time forms (MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS) in whole minutes."""
    match = TIME.match(str(text).strip())
    if not match:
        raise RecipeError(
            f"`slurm.time={text}` is not a SLURM time: write minutes (90), HH:MM:SS "
            "(04:00:00) or D-HH:MM:SS (1-00:00:00).",
            key="slurm.time",
        )
    days, first, second, third = (int(g) if g else 0 for g in match.groups())
    if match.group(1) is not None:  # D-HH[:MM[:SS]]
        minutes = days * 1440 + first * 60 + second + (1 if third else 0)
    elif match.group(2) is None:  # MINUTES or MINUTES:SS
        minutes = second + (1 if third else 0)
    elif match.group(4) is None:  # MM:SS
        minutes = first + (1 if second else 0)
    else:  # HH:MM:SS
        minutes = first * 60 + second + (1 if third else 0)
    if minutes < 1:
        raise RecipeError(
            f"`slurm.time={text}`: a job needs at least one minute.", key="slurm.time"
        )
    return minutes


def rendezvous_port(port: int | None, job_id: int) -> int:
    """The port a multi-node job's first node listens on for the others: every node reaches
    the same number alone, from `slurm.master_port` or SLURM's job id."""
    return port or PORT_BASE + job_id % PORT_SPAN


def signal_delay_s(cfg: EngineConfig) -> int:
    """Seconds before the time limit SLURM signals a job (it requeues itself): never at the
    start of a short job, which would requeue before it trains a step."""
    return min(cfg.slurm.signal_delay_s, time_minutes(cfg.slurm.time) * 30)


def stage_job(needs: StageNeeds, cfg: EngineConfig, partition: Partition) -> StageJob:
    """One stage's job, checked against the partition."""
    slurm, per_node = cfg.slurm, needs.processes_per_node
    gpus = per_node if needs.on_gpu else 0
    port = master_port(slurm.master_port)
    job = StageJob(
        stage=needs.stage,
        nodes=cfg.nodes,
        processes_per_node=per_node,
        gpus_per_node=gpus,
        cpus_per_node=slurm.cpus_per_task or default_cpus(gpus, per_node),
        mem_gb=math.ceil(slurm.mem_gb or needs.host_gib),
        time_min=time_minutes(slurm.time),
        pool=f"partition {partition.name}",
        after=needs.after,
        detail=_rendezvous(cfg.nodes, port),
    )
    check_request(_stage_request(job), partition)
    return job


def _rendezvous(nodes: int, port: int | None) -> str:
    if nodes == 1:
        return ""
    derived = f"{PORT_BASE} + job id mod {PORT_SPAN}"
    return f"; rendezvous on the first node's port {port or derived}"


def master_port(port: int | None) -> int | None:
    """`slurm.master_port`, a port an unprivileged job may listen on."""
    if port is not None and not 1024 <= port <= 65535:
        raise RecipeError(
            f"`slurm.master_port={port}` is not a port a job can listen on: give one from "
            "1024 to 65535, or leave it unset (20000 + the job id mod 20000).",
            key="slurm.master_port",
        )
    return port


@dataclass(frozen=True)
class Asked:
    """One amount a job asks for, and the key that set it (named in a refusal)."""

    amount: int | float
    key: str


@dataclass(frozen=True)
class ResourceRequest:
    """What one job asks SLURM for."""

    who: str  # "Stage `llm`", "Each sweep job"
    nodes: Asked
    gpus_per_node: Asked
    cpus_per_task: Asked
    mem_gb: Asked
    time_min: Asked


def _stage_request(job: StageJob) -> ResourceRequest:
    return ResourceRequest(
        who=f"Stage `{job.stage}`",
        nodes=Asked(job.nodes, "nodes"),
        gpus_per_node=Asked(job.gpus_per_node, "device"),
        cpus_per_task=Asked(job.cpus_per_node, "slurm.cpus_per_task"),
        mem_gb=Asked(job.mem_gb, "slurm.mem_gb"),
        time_min=Asked(job.time_min or 0, "slurm.time"),
    )


def check_request(request: ResourceRequest, partition: Partition) -> None:
    """What the partition cannot give, refused with the key that asked for it (sbatch would
    refuse it too, with a message that names neither)."""
    where, who = f"partition `{partition.name}`", request.who
    every = partition.smallest()  # what each of its nodes gives
    nodes, nodes_key = request.nodes.amount, request.nodes.key
    gpus, gpus_key = request.gpus_per_node.amount, request.gpus_per_node.key
    cpus, cpus_key = request.cpus_per_task.amount, request.cpus_per_task.key
    mem, mem_key = request.mem_gb.amount, request.mem_gb.key
    minutes, time_key = request.time_min.amount, request.time_min.key
    if nodes > len(partition.nodes):
        raise RecipeError(
            f"{who} asks for {nodes} nodes (`{nodes_key}`), but {where} has "
            f"{len(partition.nodes)}. Set `{nodes_key}={len(partition.nodes)}` or fewer, or use "
            "another partition.",
            key=nodes_key,
        )
    if gpus > every.gpus:
        raise RecipeError(
            f"{who} asks for {gpus} GPU(s) per node (`{gpus_key}`), but the nodes of {where} "
            f"declare {every.gpus} (gres). Use `device=cpu`, or a partition with "
            "GPUs.",
            key=gpus_key,
        )
    if cpus > every.cpus:
        raise RecipeError(
            f"{who} asks for {cpus} CPU(s) (`{cpus_key}`), but the nodes of {where} have "
            f"{every.cpus}. Set `{cpus_key}={every.cpus}` or fewer.",
            key=cpus_key,
        )
    if mem * 1000 > every.memory_mb:
        raise RecipeError(
            f"{who} asks for {mem:g} GB of host memory (`{mem_key}`), but the nodes of {where} "
            f"have {every.memory_mb} MB. Set `{mem_key}={every.memory_mb // 1000}` or less.",
            key=mem_key,
        )
    if partition.max_time_min is not None and minutes > partition.max_time_min:
        raise RecipeError(
            f"{who} asks for {minutes} min (`{time_key}`), but {where} allows "
            f"{partition.max_time_min}. Set `{time_key}={partition.max_time_min}` or less.",
            key=time_key,
        )


def sweep_job_request(launcher: Mapping[str, Any]) -> ResourceRequest:
    """What each job of a `hydra/launcher=*submitit_slurm` sweep asks for: the launcher's own
    keys (`hydra.launcher.*`)."""
    key = "hydra.launcher."
    mem = launcher.get("mem_gb")
    return ResourceRequest(
        who="Each sweep job",
        nodes=Asked(int(launcher.get("nodes") or 1), key + "nodes"),
        gpus_per_node=Asked(int(launcher.get("gpus_per_node") or 0), key + "gpus_per_node"),
        cpus_per_task=Asked(int(launcher.get("cpus_per_task") or 1), key + "cpus_per_task"),
        mem_gb=Asked(float(mem) if mem is not None else 0.0, key + "mem_gb"),
        time_min=Asked(int(launcher.get("timeout_min") or 1), key + "timeout_min"),
    )
