"""What machine are we on? GPUs, MPS and the launcher environment, without touching CUDA.

No torch import: importing torch (or calling `torch.cuda.*`) initialises CUDA, after which
setting CUDA_VISIBLE_DEVICES for `gpus=` no longer has any effect. `nvidia-smi` runs in a
child process and reports physical indices regardless of CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.cpu import CpuFacts, detect_cpu


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: physical index (as nvidia-smi numbers it), name, total memory in GiB."""

    index: int
    name: str
    memory_gib: float  # 0 or less = unknown: fit checks are skipped for it


NVIDIA_SMI_QUERY = (
    "--query-gpu=index,name,memory.total",
    "--format=csv,noheader,nounits",
)
NVIDIA_SMI_TIMEOUT_S = 15


@dataclass(frozen=True)
class Machine:
    """The machine and process this engine runs in, as plain data for the planner."""

    gpus: tuple[GpuInfo, ...]
    mps_available: bool
    cuda_visible_devices: str | None
    world_size: int
    rank: int
    local_rank: int
    launched_by: str  # python | torchrun | accelerate | deepspeed | other
    # The CPU stages placed on it compute with (unmeasured: assumed to compute bfloat16 natively).
    cpu: CpuFacts = CpuFacts("unknown", 0.0)


def parse_nvidia_smi(text: str) -> tuple[GpuInfo, ...]:
    """GPUs from `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.

    memory.total is in MiB; a line that does not parse is skipped (memory "[N/A]" -> 0 = unknown).
    """
    gpus = []
    for line in text.splitlines():
        # Names may contain commas in theory: index first, memory last, name in between.
        index, _, rest = line.partition(",")
        name, _, memory = rest.rpartition(",")
        if not index.strip().isdigit() or not name.strip():
            continue
        name = name.strip()
        try:
            memory_gib = float(memory) / 1024
        except ValueError:
            memory_gib = 0.0
        gpus.append(GpuInfo(index=int(index), name=name, memory_gib=round(memory_gib, 2)))
    return tuple(sorted(gpus, key=lambda g: g.index))


def _query_nvidia_smi() -> str:
    """Raw nvidia-smi output, or '' when it is absent or fails (no driver, no GPU, timeout)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        done = subprocess.run(
            [exe, *NVIDIA_SMI_QUERY],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _int_env(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise RecipeError(f"Environment variable {key}={value!r} is not an integer.") from None


def _launched_by(env: Mapping[str, str]) -> str:
    """Which launcher started this process; 'python' when none set up a process group."""
    # A launcher matters only once it sets LOCAL_RANK / WORLD_SIZE: that is what puts
    # accelerate into a distributed mode. `accelerate launch --num_processes 1` runs a plain
    # process and is reported as python.
    if "LOCAL_RANK" not in env and _int_env(env, "WORLD_SIZE", 1) <= 1:
        return "python"
    # accelerate multi-process launches go through torch elastic too: check it first.
    if "ACCELERATE_MIXED_PRECISION" in env or any(k.startswith("ACCELERATE_USE_") for k in env):
        return "accelerate"
    if "TORCHELASTIC_RUN_ID" in env:
        return "torchrun"
    # deepspeed/launcher/launch.py sets these next to the torch variables.
    if "CROSS_RANK" in env and "LOCAL_SIZE" in env:
        return "deepspeed"
    return "other"  # srun/mpirun or a hand-set WORLD_SIZE


def _mps_available() -> bool:
    # MPS exists only on macOS on Apple Silicon; asking torch would import it.
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def detect_machine(env: Mapping[str, str] | None = None) -> Machine:
    """Detect GPUs (nvidia-smi), MPS (platform), the launcher (env) and the CPU's bfloat16
    (measured in a child process, once) without initialising CUDA."""
    env = os.environ if env is None else env
    return Machine(
        gpus=parse_nvidia_smi(_query_nvidia_smi()),
        mps_available=_mps_available(),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        world_size=_int_env(env, "WORLD_SIZE", 1),
        rank=_int_env(env, "RANK", 0),
        local_rank=_int_env(env, "LOCAL_RANK", 0),
        launched_by=_launched_by(env),
        cpu=detect_cpu(env),
    )


def is_main_process(env: Mapping[str, str] | None = None) -> bool:
    """Rank 0 of a distributed launch, or the only process: the one that writes results."""
    return int((os.environ if env is None else env).get("RANK", "0")) == 0
