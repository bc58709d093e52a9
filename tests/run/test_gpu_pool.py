"""Parallel sweep jobs lease distinct GPUs from the `gpus` pool, and wait when all are taken."""

from __future__ import annotations

import threading
import time

import pytest

from recipe_engine.run.gpu_pool import job_pool, lease_gpu


def test_concurrent_leases_get_distinct_gpus_and_a_third_waits(tmp_path):
    with lease_gpu([6, 7], tmp_path) as first, lease_gpu([6, 7], tmp_path) as second:
        assert {first, second} == {6, 7}
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(next(iter([_lease_once(tmp_path)]))))
        waiter.start()
        time.sleep(0.3)
        assert got == [], "all GPUs are leased: the third job waits"
    waiter.join(timeout=5)
    assert got and got[0] in (6, 7)


def _lease_once(lock_dir) -> int:
    with lease_gpu([6, 7], lock_dir, poll_s=0.05) as gpu:
        return gpu


@pytest.mark.parametrize(
    ("gpus", "parallel", "launcher", "pool"),
    [
        ([0, 1], "auto", "joblib", [0, 1]),
        ([0, 1], "auto", "basic", None),  # sequential jobs may use every GPU
        ([0, 1], "ddp", "joblib", None),  # a DDP job needs all of its GPUs
        ([3], "auto", "joblib", None),
        (None, "auto", "joblib", None),
        # A scheduler assigns each job its GPUs (CUDA_VISIBLE_DEVICES): nothing to lease.
        ([0, 1], "auto", "submitit_slurm", None),
        ([0, 1], "auto", "submitit_local", None),
        ([0, 1], "auto", "recipe-submitit-slurm", None),
    ],
)
def test_which_sweeps_lease_one_gpu_per_job(gpus, parallel, launcher, pool):
    assert job_pool(gpus, parallel, launcher) == pool
