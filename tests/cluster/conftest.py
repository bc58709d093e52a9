"""The cluster tests run against real schedulers on this host, each started once for the
session (when a test asks for it) and stopped at its end: a two-node SLURM cluster
(tests/cluster/slurm_cluster.py) and a three-node Ray cluster (tests/cluster/ray_cluster.py).

Each module is marked `cluster`: `make test` leaves them out (pyproject's `-m "not cluster"`),
`make test-cluster` installs SLURM where it is missing and runs them all (`make test-ray`: the
Ray ones alone). Without SLURM or Ray installed they fail, never skip: a missing scheduler is a
failure there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from ray_cluster import RayCluster
from slurm_cluster import SlurmCluster

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    with cluster:
        before = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)  # the engine's sbatch / sinfo calls
        try:
            yield cluster
        finally:
            if before is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = before


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    with RayCluster(tmp_path_factory.mktemp("ray")) as cluster:
        yield cluster


def job_ids(submitted: str) -> dict[str, str]:
    """{stage: job id} from the lines `run launcher=slurm` prints."""
    ids = {}
    for line in submitted.splitlines():
        if line.startswith("stage ") and ": SLURM job " in line:
            stage = line.split()[1].rstrip(":")
            ids[stage] = line.split(": SLURM job ")[1].split()[0]
    return ids


def sacct(cluster: SlurmCluster, ids: list[str], *fields: str) -> dict[str, dict[str, str]]:
    names = ["JobID", "State", *fields]
    out = cluster.command("sacct", "-X", "-n", "-P", "-o", ",".join(names), "-j", ",".join(ids))
    rows = [dict(zip(names, line.split("|"), strict=True)) for line in out.splitlines() if line]
    return {row["JobID"]: row for row in rows}


def wait_for_jobs(
    cluster: SlurmCluster, ids: list[str], timeout: float = 600, *fields: str
) -> dict[str, dict[str, str]]:
    """Poll sacct until every job ended; their rows (State without `by <uid>`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sacct(cluster, ids, *fields)
        states = {i: rows.get(i, {}).get("State", "").split()[0:1] for i in ids}
        if all(s and s[0] in TERMINAL for s in states.values()):
            return {i: {**rows[i], "State": rows[i]["State"].split()[0]} for i in ids}
        time.sleep(2)
    squeue = subprocess.run(["squeue"], env=cluster.env, capture_output=True, text=True).stdout
    raise AssertionError(f"jobs {ids} did not end in {timeout} s:\n{squeue}")
