"""A real three-node Ray cluster on this one host, for the Ray launcher's tests (`make
test-cluster`, or `make test-ray` alone).

A head node that runs no task (no CPUs, as KubeRay advises for a head) with the dashboard and
its job server (`ray job submit` / `ray job stop`), and two worker nodes of 2 CPUs and 6 GB
each. Every node is `ray start --block` in a process group of its own, with a temp folder of
its own (nodes sharing one would each forward every worker's log to the driver), started with
this process's environment: a node's Python imports the checkout under test. Killing a worker
kills its whole process tree (its raylet, its Ray workers, what they started), as a machine
that is lost. Nothing listens beyond this host.

By hand: `python tests/cluster/ray_cluster.py` starts one and prints `export RAY_ADDRESS=...`
(Ctrl-C stops it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

WORKER_CPUS = 2
WORKER_MEMORY = 6_000_000_000
OBJECT_STORE = 200_000_000  # each node's; the stages pass nothing through it


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RayCluster:
    root: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)
    port: int = field(default_factory=_free_port)
    dashboard_port: int = field(default_factory=_free_port)
    # The nodes' temp folders: short, for Ray's sockets (a socket path has at most 107 bytes).
    temp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp")))

    @property
    def address(self) -> str:
        """The cluster's address for a driver (`ray.address=`, RAY_ADDRESS)."""
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        """The job server's address (`ray job submit --address`)."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> RayCluster:
        head = [
            "--head",
            f"--port={self.port}",
            "--num-cpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
        ]
        self._start_node("head", head)
        self._wait_for(lambda: self._alive() >= 1, "the head node", 120)
        for name in ("worker-1", "worker-2"):
            self.start_worker(name)
        return self

    def start_worker(self, name: str, cpus: int = WORKER_CPUS, gpus: int = 0) -> None:
        """A worker node; `gpus` declared to Ray (it assigns them to tasks by id, as it would
        a real node's, whether or not the host has them)."""
        self._start_node(
            name,
            [
                f"--address={self.address}",
                f"--num-cpus={cpus}",
                f"--num-gpus={gpus}",
                f"--memory={WORKER_MEMORY}",
            ],
        )
        expected = len(self.nodes)
        self._wait_for(lambda: self._alive() >= expected, f"node {name}", 120)

    def kill_node(self, name: str, settle: bool = True) -> None:
        """The node lost at once: its whole process tree killed (SIGKILL). With `settle`, until
        the head counts it dead too (its missed health checks, seconds later): until then
        `ray.nodes()` still lists it alive, and the next test's run would find a node that
        cannot run its check."""
        process = self.nodes.pop(name)
        with contextlib.suppress(psutil.NoSuchProcess):
            tree = psutil.Process(process.pid)
            for member in [*tree.children(recursive=True), tree]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    member.kill()
        process.wait()
        if settle and "head" in self.nodes:
            left = len(self.nodes)
            self._wait_for(lambda: self._alive() <= left, f"node {name} counted dead", 180)

    def node_running(self, pattern: str) -> str:
        """The worker node whose process tree runs a command line containing `pattern`."""
        for name, process in self.nodes.items():
            for child in psutil.Process(process.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if pattern in " ".join(child.cmdline()):
                        return name
        raise AssertionError(f"no node runs {pattern!r}")

    def stop(self) -> None:
        """Every node's process tree killed (a test cluster keeps nothing), workers first."""
        for name in list(self.nodes)[::-1]:
            self.kill_node(name, settle=False)
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_node(self, name: str, arguments: list[str]) -> None:
        temp = self.temp / name
        command = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--block",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
            f"--object-store-memory={OBJECT_STORE}",
            *arguments,
        ]
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 (kept open by the node)
        self.nodes[name] = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _alive(self) -> int:
        """Nodes the cluster counts alive (`ray status`: one ` 1 node_<id>` line each under
        `Active:`)."""
        done = subprocess.run(
            [str(Path(sys.executable).with_name("ray")), "status", f"--address={self.address}"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        active = done.stdout.partition("Active:")[2].partition("Pending:")[0]
        return sum(line.strip().startswith("1 node_") for line in active.splitlines())

    def _wait_for(self, ready, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, process in self.nodes.items():
                if process.poll() is not None:
                    log = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"ray node {name} exited {process.returncode}:\n{log}")
            if ready():
                return
            time.sleep(1)
        raise RuntimeError(f"{what} did not join the Ray cluster in {seconds} s")


def _serve() -> None:
    with tempfile.TemporaryDirectory(prefix="ray-cluster-") as root, RayCluster(Path(root)) as c:
        print(f"export RAY_ADDRESS={c.address}  # job server: {c.dashboard}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    _serve()
