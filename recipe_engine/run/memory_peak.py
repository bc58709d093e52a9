"""The peak memory a stage's training really used, to set beside the plan's estimate.

CUDA: the caching allocator's own counters (`max_memory_allocated`, `max_memory_reserved`).
CPU has no allocator statistics, and process RSS mixes in the Python heap, libraries and
memory the allocator keeps: `LiveTensorBytes` counts tensor storages instead. Every storage
alive when training starts (weights, quantization constants, ...) is the baseline; a
`TorchDispatchMode` sees every storage an operator creates afterwards (activations, logits,
gradients, optimizer state, in the backward pass too) and a weak reference tells when it is
freed. The peak is the most bytes alive at once. The mode runs Python on every operator,
which doubles a tiny model's step time, so it watches the first `TRACKED_STEPS` optimizer
steps only: the optimizer state exists from the first step on, and later steps repeat the
same allocations (a later, longer batch can go past the figure; the estimate uses the
longest row).
"""

from __future__ import annotations

import gc
import time
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import TrainerCallback

GIB = 2**30
TRACKED_STEPS = 3


@dataclass
class PeakMemory:
    """What was measured: the peak in GiB, how, and what measuring cost."""

    peak_gib: float = 0.0
    reserved_gib: float | None = None  # CUDA: the allocator's reserved peak
    method: str = ""
    tracking_s: float = 0.0  # time spent in the tracker's own bookkeeping (CPU)
    baseline_gib: float = 0.0  # CPU: tensors alive before the first step (weights and more)


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of live tensor storages, and their peak, while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.seen: set[int] = set()
        self.spent_s = 0.0

    def start(self) -> None:
        """Every storage alive now is the baseline (weights, buffers, quantization state)."""
        with warnings.catch_warnings():  # isinstance touches deprecated module proxies
            warnings.simplefilter("ignore", FutureWarning)
            tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
        for tensor in tensors:
            if not tensor.is_meta:
                self._add(tensor)
        self.peak = self.live

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        started = time.perf_counter()
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._add(leaf)
        self.spent_s += time.perf_counter() - started
        return out

    def _add(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested and similar: no storage
            return
        key = id(storage)
        size = storage.nbytes()
        if key in self.seen or size == 0 or storage.device.type == "meta":
            return
        self.seen.add(key)
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, size)

    def _free(self, key: int, size: int) -> None:
        self.seen.discard(key)
        self.live -= size


class FirstSteps(TrainerCallback):
    """Switches the tracker on for the first `steps` optimizer steps of a training run."""

    def __init__(self, tracker: LiveTensorBytes, steps: int = TRACKED_STEPS) -> None:
        self.tracker, self.left, self.active = tracker, steps, False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.left > 0 and not self.active:
            self.tracker.__enter__()
            self.active = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.stop()
        self.left -= 1

    def stop(self) -> None:
        if self.active:
            self.tracker.__exit__(None, None, None)
            self.active = False


@contextmanager
def peak_memory(device: str, trainer: Any) -> Iterator[PeakMemory]:
    """Measure the peak of `trainer`'s training in the block on `device` (cuda | cpu | mps);
    filled in on exit."""
    result = PeakMemory()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        yield result
        result.peak_gib = torch.cuda.max_memory_allocated() / GIB
        result.reserved_gib = torch.cuda.max_memory_reserved() / GIB
        result.method = "cuda max_memory_allocated"
        return
    tracker = LiveTensorBytes()
    started = time.perf_counter()
    tracker.start()
    result.baseline_gib = tracker.live / GIB
    baseline_s = time.perf_counter() - started
    steps = FirstSteps(tracker)
    trainer.add_callback(steps)
    try:
        yield result
    finally:
        steps.stop()
        trainer.remove_callback(steps)
    result.peak_gib = tracker.peak / GIB
    result.method = f"live tensor bytes (TorchDispatchMode), first {TRACKED_STEPS} steps"
    result.tracking_s = baseline_s + tracker.spent_s


def free_memory() -> None:
    """Collect what is unreachable now (a finished stage's reference cycles) and hand the
    CUDA allocator's cache back, so the next stage starts from what it holds itself."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
