"""This machine as a Platform: what a stage's manifest records and reuse is checked against."""

from __future__ import annotations

import platform

import torch

from recipe_engine.resolve.cpu import cpu_model
from recipe_engine.run.machine import measure_platform, platform_here
from recipe_engine.versions import package_version


def test_a_cpu_stage_records_the_cpu_its_kernels_threads_and_libraries():
    here = measure_platform("cpu", deterministic=False)
    assert here.device == "cpu" and here.gpu is None and here.gpu_capability is None
    assert here.cpu == cpu_model() and here.cpu != ""
    assert here.cpu_capability == torch.backends.cpu.get_cpu_capability()
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert here.cpu_bfloat16 == ("native" if native else "emulated")
    assert f"bfloat16 {here.cpu_bfloat16})" in here.describe()
    assert here.threads == torch.get_num_threads()
    assert here.libraries["torch"] == package_version("torch")
    assert set(here.libraries) >= {"transformers", "trl", "peft", "bitsandbytes", "accelerate"}
    assert here.python == platform.python_version() and not here.deterministic


def test_measuring_twice_gives_the_same_platform():
    assert measure_platform("cpu", deterministic=True) == platform_here("cpu", deterministic=True)


def test_another_thread_count_is_another_platform():
    before = torch.get_num_threads()
    here = measure_platform("cpu", deterministic=False)
    try:
        torch.set_num_threads(before + 1)
        (difference,) = here.differences(measure_platform("cpu", deterministic=False))
    finally:
        torch.set_num_threads(before)
    assert difference.text() == f"threads {before} vs {before + 1}"


def test_a_machine_without_the_device_has_no_platform_for_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU's absence, anywhere
    assert platform_here("cuda", deterministic=False) is None
