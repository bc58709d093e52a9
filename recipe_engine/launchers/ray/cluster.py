"""The Ray cluster a recipe's stages go to (`launcher=ray`): its address, this process
connected to it as a driver, and its nodes as a `Partition` (read once, before the jobs are
planned), so `plan` refuses a stage no node can hold before anything is submitted.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from recipe_engine.capabilities import StageCode
from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import NodeOffer, Partition
from recipe_engine.versions import package_version

ADDRESS_VARIABLE = "RAY_ADDRESS"  # what Ray's own CLI reads, and what `ray job submit` sets
GCS_PORT, CLIENT_PORT = 6379, 10001
CONNECT_TIMEOUT_S = 5.0
CHECK_TIMEOUT_S = 120.0  # a node's check imports the engine and the user's code


def require_ray() -> ModuleType:
    """Ray's client, or one message saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RecipeError(
            "`launcher=ray` drives a Ray cluster: pip install 'recipe-engine[ray]'.",
            key="launcher",
        ) from None
    return ray


def cluster_address(cfg: EngineConfig) -> str:
    """`ray.address`, else RAY_ADDRESS; a dashboard's address (what `ray job submit` takes)
    or none at all is refused, saying where to find the right one."""
    address = cfg.ray.address or os.environ.get(ADDRESS_VARIABLE)
    key = "ray.address" if cfg.ray.address else ADDRESS_VARIABLE
    if not address:
        raise RecipeError(
            "`launcher=ray` needs the Ray cluster's address: set `ray.address=HOST:6379` (or "
            f"`ray://HOST:10001`), or {ADDRESS_VARIABLE} as for Ray's own CLI. `ray start "
            "--head` prints it; `ray job submit` sets it for the command it runs.",
            key="ray.address",
        )
    if address.startswith(("http://", "https://")):
        raise RecipeError(
            f"`{key}={address}` is a Ray dashboard's address (`ray job submit` takes it); this "
            "command drives the cluster itself: give the cluster's address (HOST:6379, or "
            "ray://HOST:10001), or run it through `ray job submit -- python -m recipe_engine "
            "...`.",
            key="ray.address",
        )
    if address == "local":
        raise RecipeError(
            f"`{key}=local` would start a new one-machine Ray instance here; `launcher=ray` "
            "runs on a cluster that is running. Use `launcher=local` on this machine, or the "
            "cluster's address.",
            key="ray.address",
        )
    return address


def connect(cfg: EngineConfig) -> str:
    """This process connected to the cluster as a driver (once a process); its address. An
    address nothing answers at is one message, before anything is written."""
    ray = require_ray()
    address = cluster_address(cfg)
    if ray.is_initialized():
        return address
    _check_reachable(address)
    try:
        ray.init(
            address=address,
            runtime_env=dict(cfg.ray.runtime_env) or None,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )
    except (ConnectionError, RuntimeError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RecipeError(
            f"Cannot connect to the Ray cluster at {address}: {first[:300]}", key="ray.address"
        ) from None
    return address


def _check_reachable(address: str) -> None:
    """Ray waits minutes for an address nothing answers at: asked first, in seconds."""
    if address == "auto":
        return  # Ray finds the cluster this machine is a node of, or says there is none
    client = address.startswith("ray://")
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":") if ":" in where else (where, "", "")
    number = int(port) if port.isdigit() else (CLIENT_PORT if client else GCS_PORT)
    try:
        socket.create_connection((host or where, number), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise RecipeError(
            f"No Ray cluster answers at {address} ({error.strerror or error}): start it "
            "(`ray start --head`), or check `ray.address` / RAY_ADDRESS. Nothing was "
            "submitted.",
            key="ray.address",
        ) from None


def read_partition(cfg: EngineConfig) -> Partition:
    """The cluster's live nodes that can run a stage (a head started with no CPUs and no
    GPUs, as KubeRay advises, runs none), as Ray counts their resources."""
    address = connect(cfg)
    ray = require_ray()
    nodes = []
    for node in ray.nodes():
        if not node.get("Alive") or not _runs_tasks(node):
            continue
        resources = node["Resources"]
        name = f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"
        memory_mb = int(resources.get("memory", 0) // 1_000_000)
        nodes.append(
            NodeOffer(name, int(resources.get("CPU", 0)), memory_mb, int(resources.get("GPU", 0)))
        )
    return Partition(f"the Ray cluster at {address}", "ray", tuple(nodes))


def check_nodes(cfg: EngineConfig, code: Sequence[StageCode]) -> None:
    """Every node that runs tasks finds the engine (the driver's version), the folder the
    stages run in and the user's code they run, by content, as a stage's process would: a
    node that lacks any is one message naming it and what it lacks, before anything is
    submitted (ship code with `ray.runtime_env`: py_modules, working_dir)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from recipe_engine.launchers.ray import node

    connect(cfg)
    ray = require_ray()
    cwd = None if "working_dir" in cfg.ray.runtime_env else os.getcwd()
    check = node.NodeCheck(package_version("recipe-engine") or "unknown", cwd, tuple(code))
    remote = ray.remote(num_cpus=0, max_retries=0)(node.check_node)
    asked = {
        remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(check, {}): f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})"
        for n in ray.nodes()
        if n.get("Alive") and _runs_tasks(n)
    }
    for ref, name in asked.items():
        try:
            named, problems = ray.get(ref, timeout=CHECK_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 (it could not even start the check there)
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            named, problems = name, [f"the check did not run there ({first[:300]})"]
        if problems:
            raise RecipeError(
                f"Node {named} of the Ray cluster cannot run this recipe's stages: "
                f"{'; '.join(problems)}. Install the same there, or ship it with "
                "`ray.runtime_env` (py_modules=[...], working_dir=...). Nothing was submitted.",
                key="ray.runtime_env",
            )


def _runs_tasks(node: Mapping[str, Any]) -> bool:
    resources = node.get("Resources", {})
    return bool(resources.get("CPU", 0) or resources.get("GPU", 0))
