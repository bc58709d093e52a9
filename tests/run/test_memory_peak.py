"""The CPU peak: live tensor bytes while the first optimizer steps run, not process RSS."""

from __future__ import annotations

import torch

from recipe_engine.run.memory_peak import FirstSteps, LiveTensorBytes

MIB = 2**20


def step(callback: FirstSteps, mib: int) -> None:
    """One 'optimizer step' that holds `mib` MiB of float32 activations at its top."""
    callback.on_step_begin(None, None, None)
    activations = torch.ones(mib * MIB // 4)
    del activations
    callback.on_step_end(None, None, None)


def test_the_tracker_counts_what_the_first_steps_allocate_and_then_stops():
    tracker = LiveTensorBytes()
    tracker.start()
    baseline = tracker.live
    steps = FirstSteps(tracker, steps=3)
    for mib in (1, 2, 1):
        step(steps, mib)
    assert tracker.peak - baseline == 2 * MIB  # the largest step, freed tensors leave
    step(steps, 8)  # past the tracked steps: the dispatch mode is off, costing nothing
    assert tracker.peak - baseline == 2 * MIB
    assert not steps.active
