"""Where an engine run's training steps spend their time: torch.profiler around a few optimizer
steps of a real `python -m recipe_engine` run (`make gpu-report`'s `profile` step).

    python -m tools.profile_step [--skip 5] [--steps 5] -- OVERRIDES...

The run is the engine's own, in this process (the CLI run as `__main__`, as `-m` does); the
profiler starts when the Trainer begins optimizer step `--skip` + 1 (after the warm-up: the
first steps' kernel choices and allocations) and stops `--steps` steps later. It prints the
operators that took the most device time and the most host time, then one line: the wall time
per step, the share of it the device's kernels ran, and the kernel launches per step. A step
whose kernels fill a small share of its wall time is waiting on the host (launches, syncs, the
data loader), which a larger batch or fewer, fused kernels would help, not a faster card.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList
from torch.profiler import ProfilerActivity, profile

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
TOP = 15


@dataclass(frozen=True)
class StepProfile:
    """What the profiled window of steps measured, per optimizer step."""

    steps: int
    wall_s: float
    device_s: float  # the device kernels' own time (0 on a CPU)
    launches: float  # kernel launches from the host

    def summary(self) -> str:
        busy = self.device_s / self.wall_s if self.wall_s else 0.0
        return (
            f"per optimizer step over {self.steps}: {self.wall_s * 1000:.1f} ms wall, "
            f"device kernels {self.device_s * 1000:.1f} ms ({busy:.0%} busy), "
            f"{self.launches:,.0f} kernel launches"
        )


class StepWindow:
    """Starts the profiler at optimizer step `skip` and stops it `steps` steps later, from
    inside `Trainer.training_step` (called once per micro-batch, before the step's forward)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps = skip, steps
        self.profiler: profile | None = None
        self.started = 0.0
        self.result: StepProfile | None = None

    def at(self, global_step: int) -> None:
        if self.profiler is None and self.result is None and global_step == self.skip:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            synchronize()
            self.profiler = profile(activities=activities)
            self.profiler.start()
            self.started = time.perf_counter()
        elif self.profiler is not None and global_step == self.skip + self.steps:
            synchronize()
            wall = time.perf_counter() - self.started
            self.profiler.stop()
            averages = self.profiler.key_averages()  # tens of seconds on a GPU run: once
            self.result = measured(averages, wall, self.steps)
            print_profile(averages, self.result)
            self.profiler = None


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measured(averages: EventList, wall_s: float, steps: int) -> StepProfile:
    # The kernels' own events, as the profiler's table totals them: an operator's "self device
    # time" repeats the time of the kernels it launched.
    device_us = sum(
        event.self_device_time_total
        for event in averages
        if event.device_type == DeviceType.CUDA and not event.is_user_annotation
    )
    launches = sum(event.count for event in averages if event.key in LAUNCHES)
    return StepProfile(steps, wall_s / steps, device_us / 1e6 / steps, launches / steps)


def print_profile(averages: EventList, result: StepProfile) -> None:
    if result.device_s:
        print(f"top {TOP} operators by the device's own time:")
        print(averages.table(sort_by="self_device_time_total", row_limit=TOP))
    print(f"top {TOP} operators by the host's own time:")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=TOP))
    print(result.summary(), flush=True)


def arm(skip: int, steps: int) -> StepWindow:
    """Open `StepWindow(skip, steps)` from every Trainer's `training_step` in this process;
    returns the window, which holds what it measured once the run passes its last step."""
    from transformers import Trainer

    window = StepWindow(skip, steps)
    training_step = Trainer.training_step

    def profiled_step(self: Trainer, *args: Any, **kwargs: Any) -> torch.Tensor:
        window.at(self.state.global_step)
        return training_step(self, *args, **kwargs)

    Trainer.training_step = profiled_step  # type: ignore[method-assign]
    return window


def profiled_run(overrides: Sequence[str], skip: int, steps: int) -> StepWindow:
    """Run the engine on `overrides` in this process with the window armed; the window holds
    what it measured (no result where the run ended before the window closed)."""
    window = arm(skip, steps)
    sys.argv = ["recipe_engine", *overrides]
    try:
        runpy.run_module("recipe_engine", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (None, 0):
            raise
    return window


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profile_step")
    parser.add_argument("--skip", type=int, default=5, help="optimizer steps before the window")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps profiled")
    parser.add_argument("overrides", nargs="*", help="the engine's overrides (after --)")
    options = parser.parse_args(argv)
    window = profiled_run(options.overrides, options.skip, options.steps)
    if window.result is None:
        print(
            f"the run ended before optimizer step {options.skip + options.steps}: nothing "
            "profiled (give the stage more steps, or --skip / --steps fewer)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
