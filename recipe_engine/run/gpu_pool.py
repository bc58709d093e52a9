"""One GPU per parallel sweep job: jobs lease GPUs from the `gpus` pool with file locks.

With `-m ... gpus=[0,1,2,3] hydra/launcher=joblib`, each job takes the first GPU of the pool no
other job holds, keeps it until it ends, and waits while all are taken. Locks live under the
output root, so concurrent jobs of one sweep (several processes) see each other.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def lease_gpu(pool: Sequence[int], lock_dir: Path, poll_s: float = 0.5) -> Iterator[int]:
    """Hold one GPU of `pool` for as long as the context lasts; yields its physical id."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for gpu in pool:
            handle = open(lock_dir / f"gpu-{gpu}.lock", "w")  # noqa: SIM115 - held by the lease
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield gpu
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(poll_s)


def job_pool(gpus: Sequence[int] | None, parallel: str, launcher: str | None) -> list[int] | None:
    """The pool a sweep job leases from: several GPUs, one-GPU jobs, a parallel launcher.

    With Hydra's basic launcher jobs run one after another, so each gets all of `gpus`.
    """
    if not gpus or len(gpus) < 2 or parallel not in ("auto", "single"):
        return None
    return list(gpus) if launcher not in (None, "basic") else None
