"""A real two-node SLURM cluster on this one host, for the cluster tests (`make test-cluster`).

Debian's slurm-wlm, slurmdbd, munge and MariaDB, configured in a temporary folder: MariaDB (the
accounting database, so `sacct` answers as on a real cluster), slurmdbd, slurmctld and two
slurmd daemons (`n1`, `n2`) that share this host's name, each on its own loopback port. Nothing
listens beyond 127.0.0.1. `SlurmCluster` starts them and stops exactly the processes it started
(by pid); a munged that was already running is used and left alone.

By hand: `python tests/cluster/slurm_cluster.py` starts one and prints `export SLURM_CONF=...`
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

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
MEMORY_MB_PER_NODE = 8000
PARTITION = "debug"
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


class ClusterUnavailable(RuntimeError):
    """What this host lacks to start the test cluster (the message says what to install)."""


def missing_programs() -> list[str]:
    """The cluster's programs not installed here (`make test-cluster` installs them)."""
    sbin = [p for p in DAEMONS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    client = [
        p
        for p in ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sacctmgr")
        if shutil.which(p) is None
    ]
    return sbin + client


def _free_ports(names: tuple[str, ...]) -> dict[str, int]:
    """A loopback port nothing listens on for each name, all different: every probe stays
    bound until all are chosen (a port probed and closed can come back for the next name, and
    slurmctld then found slurmdbd on its own port)."""
    with contextlib.ExitStack() as held:
        probes = {name: held.enter_context(socket.socket()) for name in names}
        for probe in probes.values():
            probe.bind(("127.0.0.1", 0))
        return {name: probe.getsockname()[1] for name, probe in probes.items()}


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    """Two nodes, one partition (`debug`), accounting on; `env` is what a client needs."""

    root: Path
    host: str = field(default_factory=socket.gethostname)
    started: list[subprocess.Popen] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    node_daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> SlurmCluster:
        missing = missing_programs()
        if missing:
            raise ClusterUnavailable(
                f"SLURM is not installed here (missing: {', '.join(missing)}); `make "
                "test-cluster` installs slurm-wlm, slurmdbd, munge and mariadb-server as root."
            )
        self.ports = _free_ports(("ctld", "dbd", "db", *NODES))
        for folder in ("etc", "state", "log", "db", "run", *(f"spool/{n}" for n in NODES)):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self._start_munge()
        self._start_database()
        self._write_configs()
        self._spawn("slurmdbd", [_program("slurmdbd"), "-D"])
        self._wait_for(lambda: self._listening(self.ports["dbd"]), "slurmdbd", 60)
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait_for(lambda: self._listening(self.ports["ctld"]), "slurmctld", 60)
        for node in NODES:
            self.start_node(node)
        self._wait_for(self._nodes_idle, "both nodes idle", 90)
        return self

    def start_node(self, node: str) -> None:
        argv = [_program("slurmd"), "-D", "-N", node, "-f", str(self.conf)]
        self.node_daemons[node] = self._spawn(f"slurmd-{node}", argv)

    def kill_node(self, node: str) -> None:
        """The node's daemon dies as a crashed machine's would (SIGKILL): SLURM stops hearing
        from it, and a node set down stays down until it is back and resumed."""
        daemon = self.node_daemons.pop(node)
        daemon.kill()
        daemon.wait()
        self.started.remove(daemon)

    def resume_node(self, node: str) -> None:
        """Start the node's daemon again and return it to service."""
        self.start_node(node)
        self.command("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        self._wait_for(self._nodes_idle, f"{node} idle again", 90)

    def stop(self) -> None:
        """Stop what this cluster started, newest first, by pid; nothing else."""
        self._cancel_jobs()
        for process in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.started.clear()

    def _cancel_jobs(self) -> None:
        """Jobs still queued or running end with the cluster (their processes are its)."""
        if self.started and self.conf.exists():
            subprocess.run(
                ["scancel", "--full", "--user=root"],
                env=self.env,
                capture_output=True,
                timeout=30,
                check=False,
            )
            time.sleep(1)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------------------

    def command(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        out = self.command("sinfo", "-N", "-h", "-o", "%N %T", check=False)
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- daemons ---------------------------------------------------------------------------

    def _start_munge(self) -> None:
        """munged runs as `munge` with /run/munge owned by it; one already running is used."""
        if self._munge_answers():
            return
        run = Path("/run/munge")
        run.mkdir(exist_ok=True)
        shutil.chown(run, "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            subprocess.run(["mungekey", "--create"], check=True)
            shutil.chown("/etc/munge/munge.key", "munge", "munge")
        self._spawn("munged", [_program("munged"), "--foreground"], user="munge")
        self._wait_for(self._munge_answers, "munged", 30)

    @staticmethod
    def _munge_answers() -> bool:
        if shutil.which("munge") is None:
            return False
        token = subprocess.run(["munge", "-n"], capture_output=True)
        if token.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=token.stdout, capture_output=True).returncode == 0

    def _start_database(self) -> None:
        """MariaDB in its own data folder, on a loopback port, for slurmdbd's accounting."""
        data = self.root / "db"
        subprocess.run(
            [
                "mariadb-install-db",
                "--user=root",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
        self._spawn(
            "mariadbd",
            [
                _program("mariadbd"),
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                "--bind-address=127.0.0.1",
                f"--port={self.ports['db']}",
                f"--socket={self.root / 'run' / 'mysqld.sock'}",
                f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
            ],
        )
        self._wait_for(lambda: self._listening(self.ports["db"]), "mariadbd", 60)

    def _write_configs(self) -> None:
        r = self.root
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={self.ports[n]} "
            f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB_PER_NODE} State=UNKNOWN"
            for n in NODES
        )
        self.conf.write_text(f"""\
ClusterName=recipetest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ports["ctld"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
MinJobAge=600
KillWait=10
SchedulerParameters=defer_batch
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports["dbd"]}
MpiDefault=none
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.ports["dbd"]}
SlurmUser=root
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.ports["db"]}
StorageUser=root
StorageLoc=slurm_acct_db
""")
        dbd.chmod(0o600)

    def _spawn(self, name: str, argv: list[str], user: str | None = None) -> subprocess.Popen:
        out = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (kept with the process)
        process = subprocess.Popen(
            argv,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            user=user,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def _wait_for(self, ready, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self.started if p.poll() is not None]
            if dead:
                raise ClusterUnavailable(
                    f"{' '.join(dead[0].args[:1])} exited ({dead[0].returncode}) while waiting for "
                    f"{what}; logs in {self.root / 'log'}"
                )
            time.sleep(0.5)
        raise ClusterUnavailable(f"timed out waiting for {what}; logs in {self.root / 'log'}")

    @staticmethod
    def _listening(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def _nodes_idle(self) -> bool:
        states = self.node_states()
        return all(states.get(n, "").rstrip("*") == "idle" for n in NODES)


def _serve(root: Path) -> None:
    """Start a cluster and keep it until SIGINT or SIGTERM; then stop it, ignoring more."""

    def stop_serving(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_serving)
    signal.signal(signal.SIGINT, stop_serving)
    with SlurmCluster(root) as cluster:
        print(f"export SLURM_CONF={cluster.conf}", flush=True)
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _serve(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="slurm-")))
