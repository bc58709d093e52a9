"""The CPU's bfloat16, measured: native on AVX512-BF16 or AMX, emulated (and how much slower)
where oneDNN may not use them; `ONEDNN_MAX_CPU_ISA=AVX2` makes this machine the AVX2-only
CPU a user has."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from recipe_engine.resolve import cpu
from recipe_engine.resolve.cpu import cpu_flags, detect_cpu

ROOT = Path(__file__).resolve().parents[2]
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_on_an_avx2_only_cpu_bfloat16_is_measured_emulated_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path))
    facts = detect_cpu({**os.environ, **AVX2_ONLY})
    assert facts.emulates_bfloat16 and facts.bfloat16 is not None
    assert facts.bfloat16.factor > 3, facts  # measured here: 38x on an EPYC, 87x on a Genoa
    assert f"which emulates bfloat16: a matmul takes {facts.bfloat16.factor:.0f}x" in (
        facts.describe()
    )
    assert 0 < facts.memory_gib and facts.model == cpu.cpu_model()
    [record] = (tmp_path / "cpu").iterdir()

    def no_child(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(cpu.subprocess, "run", no_child)
    assert detect_cpu({**os.environ, **AVX2_ONLY}) == facts  # read from the cache
    assert [*(tmp_path / "cpu").iterdir()] == [record]


def test_without_a_cap_the_cpu_is_as_torch_finds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in cpu.ISA_CAPS}
    facts = detect_cpu(env)
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert facts.emulates_bfloat16 is not native
    if cpu_flags() & set(cpu.BFLOAT16_FLAGS):  # the flags say so: nothing measured
        assert facts.bfloat16 is None and not (tmp_path / "cpu").exists()


def test_plan_on_an_avx2_only_cpu_says_float32_and_why_or_warns_of_an_explicit_bfloat16():
    """The done-when of the AVX2 decision, through the command line on the CPU as measured."""
    env = {**os.environ, **AVX2_ONLY}
    args = [sys.executable, "-m", "recipe_engine", "plan", "recipe=r1-llm-only",
            "model=qwen2-vl-2b"]  # fmt: skip
    auto = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert auto.returncode == 0, auto.stderr
    assert "dtype:     float32" in auto.stdout
    assert "note: dtype: float32, not bfloat16 (dtype auto): this CPU, " in auto.stdout
    assert "which emulates bfloat16: a matmul takes " in auto.stdout
    explicit = subprocess.run([*args, "model.dtype=bfloat16"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    assert explicit.returncode == 0, explicit.stderr
    assert "dtype:     bfloat16" in explicit.stdout
    assert "warning: `model.dtype=bfloat16` kept on this CPU, " in explicit.stdout
    assert "x float32's time; expect its matmuls about that much slower" in explicit.stdout


def test_the_cpu_model_falls_back_to_what_platform_knows(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "no-cpuinfo")  # not Linux
    assert cpu.cpu_model() == (platform.processor() or platform.machine() or "unknown")
    assert cpu_flags() == set()
