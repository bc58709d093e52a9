"""What a stage's job runs on a node, whatever the scheduler: the run's own command narrowed to
the one stage (`only=[stage]`, `launcher=local`, its run in `<run folder>/<stage>/`), as one
plain process on one node (the engine relaunches itself with torchrun for ddp / fsdp /
deepspeed as on any machine), or as one torchrun per node on several, the rendezvous at the
first node. Each node's torchrun keeps its agent's log folder in the stage's run folder
(`torchrun/`, one subfolder per node), not a `torchelastic_*` folder left in the node's /tmp.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPLACED = ("launcher=", "only=", "hydra.run.dir=")


def stage_args(
    args: Sequence[str], stage: str, run_dir: str | Path, extra: Sequence[str] = ()
) -> list[str]:
    """The run's arguments for its one stage, run on a node into `<run_dir>/<stage>/`;
    `extra` overrides replace the run's own of the same keys."""
    replaced = (*REPLACED, *(f"{o.lstrip('+~').partition('=')[0]}=" for o in extra))
    return [
        *(a for a in args if not a.lstrip("+~").startswith(replaced)),
        *extra,
        "launcher=local",
        f"only=[{stage}]",
        f"hydra.run.dir={Path(run_dir) / stage}",
    ]


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node stage meet: this node's rank among them, and the first
    node's address and port."""

    nodes: int
    node_rank: int
    processes_per_node: int
    master_addr: str
    master_port: int


def node_command(
    arguments: Sequence[str], stage_dir: str | Path, rendezvous: Rendezvous | None
) -> list[str]:
    """Plain Python on one node (None); on several, torchrun with this node's rank and the
    rendezvous at the first node."""
    if rendezvous is None:
        return [sys.executable, "-m", "recipe_engine", *arguments]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={rendezvous.nodes}",
        f"--node_rank={rendezvous.node_rank}",
        f"--nproc_per_node={rendezvous.processes_per_node}",
        f"--master_addr={rendezvous.master_addr}",
        f"--master_port={rendezvous.master_port}",
        f"--log-dir={Path(stage_dir) / 'torchrun'}",
        "-m",
        "recipe_engine",
        *arguments,
    ]


def port_is_free(port: int) -> bool:
    """Whether this node can listen on `port`, bound as torch's TCPStore binds (a port left in
    TIME_WAIT by an ended job is free); nothing is held after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True
