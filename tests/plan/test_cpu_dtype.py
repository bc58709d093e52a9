"""`dtype: auto` on a CPU that emulates bfloat16: float32 where it fits, said with the factor;
an explicit bfloat16 kept with a warning (planned for machines described by hand)."""

from __future__ import annotations

import dataclasses

import pytest
from machines import CPU_ONLY

from recipe_engine.config.compose import compose_config
from recipe_engine.plan.render import render_plan
from recipe_engine.resolve.cpu import BFloat16Speed, CpuFacts
from recipe_engine.run.planning import plan_from_config

# The AMD EPYC: a 1024 x 1024 matmul, one thread, 89 ms in float32, 3,408 in bfloat16.
EMULATING = CpuFacts("AMD EPYC 7B13", 24.0, BFloat16Speed(False, "AVX2", 89.0, 3408.0))
NATIVE = CpuFacts("Intel Xeon Platinum 8480+", 24.0, BFloat16Speed(True, "AVX512", 90.0, 20.0))


def plan(cpu: CpuFacts, *overrides: str):
    machine = dataclasses.replace(CPU_ONLY, cpu=cpu)
    return plan_from_config(compose_config(["recipe=r3-two-stage", *overrides]), machine)


def test_a_bfloat16_model_left_at_auto_trains_in_float32_and_plan_says_why():
    result = plan(EMULATING, "model=qwen2-vl-2b")
    for stage in result.stages.values():
        assert stage.dtype == "float32"
        [note] = [n for n in stage.notes if n.startswith("dtype:")]
        assert "emulates bfloat16: a matmul takes 38x float32's time" in note
        assert "AMD EPYC 7B13 (AVX2)" in note and "float32 fits (~" in note
        assert "GiB of its 24 GiB" in note
        assert stage.placement.warnings == ()
    assert "dtype:     float32" in render_plan(result)


def test_an_explicit_bfloat16_is_kept_with_the_slowdown():
    for override, where in [
        ("model.dtype=bfloat16", "model.dtype"),
        ("stage.llm.dtype=bfloat16", "stage.llm.dtype"),
    ]:
        llm = plan(EMULATING, "model=qwen2-vl-2b", override).stages["llm"]
        assert llm.dtype == "bfloat16"
        [warning] = llm.placement.warnings
        assert warning.startswith(f"`{where}=bfloat16` kept on this CPU, AMD EPYC 7B13 (AVX2)")
        assert "38x float32's time" in warning and f"`{where}=auto` trains in float32" in warning
        assert not any(n.startswith("dtype:") for n in llm.notes)


def test_where_float32_does_not_fit_bfloat16_is_kept_with_the_slowdown():
    small = dataclasses.replace(EMULATING, memory_gib=8.0)
    vision = plan(small, "model=qwen2-vl-2b").stages["vision"]
    assert vision.dtype == "bfloat16"
    [warning] = vision.placement.warnings
    assert "computes in bfloat16 on this CPU" in warning and "of its 8 GiB" in warning


@pytest.mark.parametrize("cpu", [NATIVE, CPU_ONLY.cpu], ids=["native", "not-measured"])
def test_a_cpu_with_native_bfloat16_keeps_it(cpu):
    for stage in plan(cpu, "model=qwen2-vl-2b").stages.values():
        assert stage.dtype == "bfloat16" and stage.placement.warnings == ()


def test_a_float32_entry_and_a_gpu_stage_are_left_as_they_are():
    assert {s.dtype for s in plan(EMULATING).stages.values()} == {"float32"}
    on_gpus = plan(EMULATING, "model=qwen2-vl-2b", "hardware=2x-rtx6000-ada")
    assert {s.dtype for s in on_gpus.stages.values()} == {"bfloat16"}


def test_the_choice_is_in_the_key():
    """float32 and bfloat16 weights differ: the stage trained on each CPU has its own key."""
    emulated = plan(EMULATING, "model=qwen2-vl-2b").stages["vision"].fingerprint
    native = plan(NATIVE, "model=qwen2-vl-2b").stages["vision"].fingerprint
    as_float32 = plan(NATIVE, "model=qwen2-vl-2b", "model.dtype=float32").stages["vision"]
    assert emulated != native and emulated == as_float32.fingerprint
