"""What this CPU computes natively: whether torch runs bfloat16 matmuls in hardware
(AVX512-BF16, AMX) or emulates them on float32 units (AVX2 only), and how much slower.

Measured once per CPU, kernel settings and torch version, in a child process (the planning
process imports no torch), and kept in the cache folder. `python -m recipe_engine.resolve.cpu`
is that child: it prints the measurement as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_engine.files import atomic_write_json, default_cache_dir
from recipe_engine.hashing import canonical_hash
from recipe_engine.versions import package_version

CPUINFO = Path("/proc/cpuinfo")
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory.max")
# What decides which kernels torch's CPU matmuls take, besides the CPU itself (oneDNN's ISA
# cap turns AVX512-BF16 off: how an AVX2-only CPU is reproduced on a newer one).
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
KERNEL_ENV = (*ISA_CAPS, "ATEN_CPU_CAPABILITY")
# CPU flags of native bfloat16 arithmetic.
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
# The measured matmul: square, one thread; the fastest of a few after a warm-up.
MATMUL_SIZE = 512
MATMUL_REPEATS = 3
MEASURE_TIMEOUT_S = 120


@dataclass(frozen=True)
class BFloat16Speed:
    """A bfloat16 matmul against a float32 one on this CPU, one thread."""

    native: bool  # torch's CPU matmuls run bfloat16 in hardware
    capability: str  # torch's CPU kernel set: AVX2, AVX512, ...
    float32_ms: float
    bfloat16_ms: float

    @property
    def factor(self) -> float:
        """How many times float32's time a bfloat16 matmul takes."""
        return self.bfloat16_ms / self.float32_ms if self.float32_ms > 0 else 1.0


@dataclass(frozen=True)
class CpuFacts:
    """The CPU a stage placed on it computes with, as plain data for the planner."""

    model: str
    memory_gib: float  # what this process may use: physical memory, or its cgroup's limit
    bfloat16: BFloat16Speed | None = None  # None: native by its flags, or not measurable

    @property
    def emulates_bfloat16(self) -> bool:
        return self.bfloat16 is not None and not self.bfloat16.native

    def describe(self) -> str:
        """ "AMD EPYC 7B13 (AVX2), which emulates bfloat16: a matmul takes 38x float32's time"."""
        speed = self.bfloat16
        if speed is None:
            return self.model
        how = (
            "native bfloat16"
            if speed.native
            else f"which emulates bfloat16: a matmul takes {speed.factor:.0f}x float32's time"
        )
        return f"{self.model} ({speed.capability}), {how}"


def detect_cpu(env: Mapping[str, str] | None = None) -> CpuFacts:
    """This CPU: its model, memory and bfloat16 speed."""
    env = dict(os.environ if env is None else env)
    return CpuFacts(cpu_model(), memory_gib(), bfloat16_speed(env))


def bfloat16_speed(env: Mapping[str, str]) -> BFloat16Speed | None:
    """Not measured (None) where the CPU's flags say native bfloat16 and no kernel setting caps
    oneDNN below it; else the cached measurement for this CPU and kernel settings, measured
    when there is none (None when the child could not: nothing to decide for)."""
    if cpu_flags() & set(BFLOAT16_FLAGS) and not any(env.get(n) for n in ISA_CAPS):
        return None
    path = default_cache_dir() / "cpu" / f"{_cache_key(env)}.json"
    if path.is_file():
        try:
            return BFloat16Speed(**json.loads(path.read_text()))
        except (TypeError, ValueError):
            pass  # an older or broken record: measured again
    speed = _measure_in_child(env)
    if speed is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, asdict(speed))
    return speed


def _cache_key(env: Mapping[str, str]) -> str:
    inputs = {
        "cpu": cpu_model(),
        "flags": sorted(cpu_flags() & {*BFLOAT16_FLAGS, "avx2", "avx512f", "amx_tile"}),
        "env": {name: env.get(name) for name in KERNEL_ENV},
        "torch": package_version("torch"),
        "python": sys.executable,
    }
    return canonical_hash(inputs)[:24]


def _measure_in_child(env: Mapping[str, str]) -> BFloat16Speed | None:
    child_env = {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "recipe_engine.resolve.cpu"],
            capture_output=True,
            text=True,
            env=child_env,
            timeout=MEASURE_TIMEOUT_S,
            check=False,
        )
        return BFloat16Speed(**json.loads(done.stdout)) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None


def measure() -> BFloat16Speed:
    """Time one matmul in float32 and in bfloat16 here (imports torch: the child's work)."""
    import torch

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)

    def fastest(dtype: torch.dtype) -> float:
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(dtype)
        b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(dtype)
        a @ b  # warm-up: kernel selection and first-touch allocation
        times = []
        for _ in range(MATMUL_REPEATS):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times) * 1000

    return BFloat16Speed(
        native=native_bfloat16(torch),
        capability=torch.backends.cpu.get_cpu_capability(),
        float32_ms=round(fastest(torch.float32), 3),
        bfloat16_ms=round(fastest(torch.bfloat16), 3),
    )


def native_bfloat16(torch: Any) -> bool:
    """oneDNN's own answer (it honours ONEDNN_MAX_CPU_ISA); the CPU's flags where torch's
    build does not say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return bool(cpu_flags() & set(BFLOAT16_FLAGS))


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo's on Linux, else what `platform` knows."""
    value = _cpuinfo_field("model name")
    return value or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty elsewhere)."""
    return set((_cpuinfo_field("flags") or "").split())


def memory_gib() -> float:
    """Physical memory, or the cgroup's limit where one is set lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = CGROUP_MEMORY.read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return round(total / 2**30, 1)


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name and value.strip():
                return value.strip()
    except OSError:  # not Linux
        pass
    return None


if __name__ == "__main__":
    print(json.dumps(asdict(measure())))
