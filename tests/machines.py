"""Machines the planner tests plan for, described rather than detected."""

from recipe_engine.resolve.machine import Machine

CPU_ONLY = Machine(
    gpus=(),
    mps_available=False,
    cuda_visible_devices=None,
    world_size=1,
    rank=0,
    local_rank=0,
    launched_by="python",
)
