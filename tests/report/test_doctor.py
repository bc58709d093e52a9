"""The `doctor` verb: libraries, devices, launcher, bitsandbytes and what `auto` would choose."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from engine_cli import engine

from recipe_engine.cli.main import main
from recipe_engine.report.doctor import _cuda_library, doctor_report

ROOT = Path(__file__).resolve().parents[2]
# The launcher variables of this shell must not leak into the "plain process" cases.
PLAIN_ENV = {"HF_HUB_OFFLINE": "1", "PATH": os.environ.get("PATH", "")}


def test_cli_doctor_prints_every_section_and_exits_0():
    env = {**PLAIN_ENV, "WORLD_SIZE": "2", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "job"}
    done = engine("doctor", cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for section in ("libraries", "launcher", "devices", "torch", "bitsandbytes", "placement"):
        assert f"== {section}" in out
    for lib in ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "deepspeed"):
        assert f"\n  {lib} " in out
    assert "torch.cuda.is_available()" in out
    assert "CUDA_VISIBLE_DEVICES" in out
    assert "launcher detected: torchrun" in out
    assert "mode: ddp, 2 process(es) from an external launcher" in out
    # torchrun sets the rendezvous address; its absence here is a problem with a fix.
    assert "MASTER_ADDR/MASTER_PORT are unset" in out


def test_plain_process_plans_single_on_cpu_and_reports_bitsandbytes_cpu_backend():
    out = doctor_report(env=PLAIN_ENV)
    assert "launcher detected: python" in out
    assert "unquantized model that fits one GPU:" in out
    assert "4-bit model that fits one GPU:" in out
    assert "mode: single, one process" in out
    assert "quantization: 4bit" in out
    assert "CPU backend: yes" in out


def test_world_size_without_known_launcher_is_ddp_with_advice():
    out = doctor_report(env={**PLAIN_ENV, "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert "launcher detected: other" in out
    assert "mode: ddp" in out
    assert "without a known launcher" in out


def test_overrides_show_the_planners_refusal_and_the_fix():
    out = doctor_report(["device=cpu", "parallel=ddp"], env=PLAIN_ENV)
    assert "(overrides: device=cpu parallel=ddp)" in out
    assert "REFUSED: `parallel=ddp` on CPU needs the number of (gloo) processes" in out
    assert "placement refused:" in out and "nproc=2" in out
    fixed = doctor_report(["device=cpu", "parallel=ddp", "nproc=2"], env=PLAIN_ENV)
    assert "REFUSED" not in fixed
    assert "mode: ddp, 2 process(es) via torch.distributed.run" in fixed


def test_hardware_profile_sizes_an_oversized_model_against_its_gpus():
    out = doctor_report(["hardware=2x-rtx6000-ada"], env=PLAIN_ENV)
    assert "on hardware profile `2x-rtx6000-ada`" in out
    assert "device: cuda (physical GPU(s) 0, 1)" in out
    assert "larger than one GPU" in out and "model_parallel" in out


def test_unparseable_launcher_variable_is_reported_not_raised():
    out = doctor_report(env={**PLAIN_ENV, "WORLD_SIZE": "two"})
    assert "problem: Environment variable WORLD_SIZE='two' is not an integer." in out


def test_invalid_override_is_a_user_error(capsys):
    assert main(["doctor", "device=tpu"]) == 2
    assert "`device=tpu` is not one of" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cuda", "expected"),
    [
        ("13.0", "libbitsandbytes_cuda130.so"),
        ("12.6", "libbitsandbytes_cuda124.so"),
        ("11.8", None),
    ],
)
def test_cuda_library_selection_follows_bitsandbytes(cuda, expected):
    libs = ["libbitsandbytes_cpu.so", "libbitsandbytes_cuda124.so", "libbitsandbytes_cuda130.so"]
    assert _cuda_library(libs, cuda, {}) == expected
