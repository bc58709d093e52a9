"""The SLURM partition a recipe's jobs go to, as `sinfo` describes it (`launcher=slurm`).

Read once, before planning the jobs: how many nodes the partition has, and what its smallest
node offers (CPUs, memory, GPUs in its gres), so `plan` refuses what sbatch would refuse.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import DownNode, JobPhase, JobState, NodeOffer, Partition

GPU_GRES = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")
# sacct's states in the words every launcher uses (a state not listed is still running).
PHASES = {
    "PENDING": JobPhase.PENDING,
    "RUNNING": JobPhase.RUNNING,
    "REQUEUED": JobPhase.REQUEUED,
    "COMPLETED": JobPhase.COMPLETED,
    "FAILED": JobPhase.FAILED,
    "OUT_OF_MEMORY": JobPhase.FAILED,
    "BOOT_FAIL": JobPhase.FAILED,
    "DEADLINE": JobPhase.TIMEOUT,
    "TIMEOUT": JobPhase.TIMEOUT,
    "CANCELLED": JobPhase.CANCELLED,
    "PREEMPTED": JobPhase.CANCELLED,
    "NODE_FAIL": JobPhase.NODE_LOST,
}


def require_slurm(key: str) -> None:
    """The SLURM client commands a submission needs, or one message saying where to run."""
    missing = [c for c in ("sbatch", "sinfo", "sacct", "scancel") if shutil.which(c) is None]
    if missing:
        raise RecipeError(
            f"`{key}` submits to SLURM, but `{missing[0]}` is not on PATH here: run the "
            "command on a login node of the cluster (or drop it to train on this machine).",
            key=key,
        )


def job_states(job_ids: list[str]) -> dict[str, JobState]:
    """The allocations' states (not their steps'), by job id."""
    require_slurm("runs jobs")
    if not job_ids:
        return {}
    fields = "JobID,State,ExitCode,NodeList,Elapsed,Reason"
    done = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", fields, "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RecipeError(f"`sacct` failed: {done.stderr.strip()[:300]}", key="launcher")
    states = {}
    for line in done.stdout.splitlines():
        state = job_state(line)
        states[state.job_id] = state
    return states


def job_state(line: str) -> JobState:
    """One line of `sacct -X -n -P -o JobID,State,ExitCode,NodeList,Elapsed,Reason`."""
    job_id, state, exit_code, nodes, elapsed, reason = line.split("|")[:6]
    said = state.split()[0]  # "CANCELLED by 0" -> CANCELLED
    phase = PHASES.get(said, JobPhase.RUNNING)
    if phase is JobPhase.PENDING and reason == "DependencyNeverSatisfied":
        phase = JobPhase.CANCELLED  # a job it waits for failed: it never runs
    return JobState(
        job_id=job_id,
        phase=phase,
        said=said,
        exit_code=exit_code,
        nodes=nodes,
        node_names=tuple(_hostnames(nodes)),
        elapsed=elapsed,
        reason=reason,
    )


def down_nodes() -> dict[str, DownNode]:
    """Nodes SLURM holds down, drained or failing, with the reason given."""
    return {
        row[0]: DownNode(row[1], f"scontrol update nodename={row[0]} state=resume")
        for row in _sinfo(["-R", "-N", "-o", "%N|%E"])
        if len(row) > 1
    }


def _hostnames(nodelist: str) -> list[str]:
    if nodelist in ("", "None assigned", "(null)"):
        return []
    if shutil.which("scontrol") is None:  # read back where SLURM is not installed
        return [nodelist]
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False
    )
    return done.stdout.split() or [nodelist]


def read_partition(name: str | None) -> Partition:
    """The named partition, or the cluster's default one (sinfo marks it with `*`)."""
    require_slurm("launcher=slurm")
    rows = _sinfo(["-N", "-o", "%P|%c|%m|%G|%l|%N"])
    partitions = sorted({row[0].rstrip("*") for row in rows})
    if name is None:
        defaults = {row[0].rstrip("*") for row in rows if row[0].endswith("*")}
        if not defaults:
            raise RecipeError(
                "The cluster has no default partition: name one with `slurm.partition=` "
                f"({', '.join(partitions)}).",
                key="slurm.partition",
            )
        name = defaults.pop()
    nodes = [row for row in rows if row[0].rstrip("*") == name]
    if not nodes:
        raise RecipeError(
            f"`slurm.partition={name}`: the cluster has no such partition. It has: "
            f"{', '.join(partitions) or '(none)'}.",
            key="slurm.partition",
        )
    return Partition(
        name=name,
        scheduler="slurm",
        nodes=tuple(
            NodeOffer(row[5], int(row[1].rstrip("+")), int(row[2].rstrip("+")), _gres_gpus(row[3]))
            for row in nodes
        ),
        max_time_min=_limit_minutes(nodes[0][4]),
    )


def _sinfo(arguments: list[str]) -> list[list[str]]:
    done = subprocess.run(
        ["sinfo", "-h", *arguments], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RecipeError(
            f"`sinfo` cannot reach the SLURM controller: {done.stderr.strip()[:300]}. Check "
            "that slurmctld runs and SLURM_CONF names its slurm.conf.",
            key="launcher",
        )
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


def _gres_gpus(gres: str) -> int:
    return sum(int(count) for count in GPU_GRES.findall(gres))


def _limit_minutes(limit: str) -> int | None:
    """sinfo's %l: `infinite`, `MM`, `HH:MM:SS` or `D-HH:MM:SS`."""
    if limit in ("infinite", "n/a", ""):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, _ = parts
    return (int(days) if days else 0) * 1440 + hours * 60 + minutes
