"""One GPU per parallel sweep job: jobs lease GPUs from the `gpus` pool with file locks.

With `-m ... gpus=[0,1,2,3] hydra/launcher=joblib`, each job takes the first GPU of the pool no
other job holds, keeps it until it ends, and waits while all are taken. Locks live under the
output root, so concurrent jobs of one sweep (several processes) see each other.

Under a scheduler (Hydra's submitit launchers: SLURM, or submitit's local executor) nothing is
leased: the scheduler hands each job its GPUs through CUDA_VISIBLE_DEVICES, and the plan reads
that as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from filelock import Timeout

from recipe_engine.files import file_lock
from recipe_engine.launchers.registry import scheduled_by


@contextmanager
def lease_gpu(pool: Sequence[int], lock_dir: Path, poll_s: float = 0.5) -> Iterator[int]:
    """Hold one GPU of `pool` for as long as the context lasts; yields its physical id."""
    while True:
        for gpu in pool:
            lock = file_lock(lock_dir / f"gpu-{gpu}.lock", timeout=0)
            try:
                lock.acquire()
            except Timeout:
                continue  # another job holds it
            try:
                yield gpu
            finally:
                lock.release()
            return
        time.sleep(poll_s)


def job_pool(gpus: Sequence[int] | None, parallel: str, launcher: str | None) -> list[int] | None:
    """The pool a sweep job leases from: several GPUs, one-GPU jobs, a parallel launcher that
    runs its jobs on this machine.

    With Hydra's basic launcher jobs run one after another, so each gets all of `gpus`; under a
    scheduler the job gets the GPUs the scheduler assigned.
    """
    if not gpus or len(gpus) < 2 or parallel not in ("auto", "single"):
        return None
    if launcher in (None, "basic") or is_scheduler(launcher):
        return None
    return list(gpus)


def is_scheduler(launcher: str) -> bool:
    """A Hydra launcher whose scheduler assigns each job's GPUs (`launchers.registry`)."""
    return scheduled_by(launcher)
