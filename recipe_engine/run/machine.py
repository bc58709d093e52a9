"""This machine as a `Platform` (store.records): what a stage's floating-point results depend on.

Measured when a stage writes its manifest, and again when a stored stage is reused or the store
listed, to tell whether it was made here; and what torch itself sees (`doctor`). It imports
torch, so it lives in the run layer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from pathlib import Path

from recipe_engine.config.library_keys import cache_dir
from recipe_engine.files import atomic_write_json
from recipe_engine.hashing import canonical_hash
from recipe_engine.resolve.cpu import KERNEL_ENV, cpu_model, native_bfloat16
from recipe_engine.store.records import Platform
from recipe_engine.versions import LIBRARIES, package_version

# What decides torch's CPU kernels and thread count besides the CPU itself.
THREAD_AND_KERNEL_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *KERNEL_ENV)


def measure_platform(device: str, *, deterministic: bool) -> Platform:
    """This process's platform for a stage whose weights live on `device` (cpu, cuda, mps);
    in a distributed run the caller is rank 0, whose manifest it goes into."""
    import torch

    kind = device.split(":")[0]
    gpu, capability = _cuda_device() if kind == "cuda" else (None, None)
    return Platform(
        device=kind,
        cpu=cpu_model(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_bfloat16="native" if native_bfloat16(torch) else "emulated",
        gpu=gpu,
        gpu_capability=capability,
        threads=torch.get_num_threads(),
        deterministic=deterministic,
        python=platform.python_version(),
        libraries={name: package_version(name) for name in LIBRARIES},
    )


def platform_here(device: str, *, deterministic: bool) -> Platform | None:
    """The platform a stage on `device` would train on here; None when this machine has no
    such device (a CUDA entry read on a CPU-only machine)."""
    import torch

    kind = device.split(":")[0]
    present = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    return measure_platform(kind, deterministic=deterministic) if present.get(kind) else None


def remembered_platform(device: str, *, deterministic: bool) -> Platform | None:
    """`platform_here`, remembered in the cache folder under what decides it without torch,
    so that a rerun whose stages are all cached imports no torch to tell where they came from
    (every trained stage remembers the platform it measured: `recorded_platform`)."""
    path = _remembered(device, deterministic)
    if path.is_file():
        return Platform.from_record(json.loads(path.read_text()))
    here = platform_here(device, deterministic=deterministic)
    return _remember(path, here) if here is not None else None


def recorded_platform(device: str, *, deterministic: bool) -> Platform:
    """The platform a stage trained on, measured now (for its manifest) and remembered."""
    here = measure_platform(device, deterministic=deterministic)
    return _remember(_remembered(device, deterministic), here)


def _remembered(device: str, deterministic: bool) -> Path:
    """Where this machine's platform is remembered: keyed by the CPU model, usable cores,
    thread and kernel variables and library versions."""
    inputs = {
        "device": device.split(":")[0],
        "deterministic": deterministic,
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "env": {name: os.environ.get(name) for name in THREAD_AND_KERNEL_ENV},
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "libraries": {name: package_version(name) for name in LIBRARIES},
        "python": platform.python_version(),
    }
    return cache_dir() / "platforms" / f"{canonical_hash(inputs)[:24]}.json"


def _remember(path: Path, here: Platform) -> Platform:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, dataclasses.asdict(here))
    return here


def _cuda_device() -> tuple[str, str]:
    """The current CUDA device's name and compute capability ("9.0")."""
    import torch

    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), f"{major}.{minor}"


@dataclasses.dataclass(frozen=True)
class TorchView:
    """What torch itself sees: its CUDA build, whether CUDA is usable and how many devices it
    sees (0 when it is not), whether MPS is."""

    cuda_build: str | None
    cuda: bool
    device_count: int
    mps: bool


def torch_view() -> TorchView:
    """Imports torch: call it only after anything that must run before (CUDA_VISIBLE_DEVICES)."""
    import torch

    # is_available/device_count query the driver; neither creates a context or allocates memory.
    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    return TorchView(torch.version.cuda, cuda, count, torch.backends.mps.is_available())
