"""Hardware detection and parsing of `gpus=` / hardware profiles; nothing here needs a GPU."""

from __future__ import annotations

import subprocess

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.plan.hardware import parse_gpus, profile_gpus
from recipe_engine.plan.placement import GpuInfo, PlacementRequest, plan_placement
from recipe_engine.resolve import machine as hardware
from recipe_engine.resolve.cpu import CpuFacts
from recipe_engine.resolve.machine import Machine, detect_machine, parse_nvidia_smi

SMI = "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H100 80GB HBM3, 81559\n"


def test_parse_nvidia_smi() -> None:
    gpus = parse_nvidia_smi(SMI)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].memory_gib == pytest.approx(79.65, abs=0.01)


def test_parse_nvidia_smi_odd_lines() -> None:
    text = "No devices were found\n3, Odd, Name, [N/A]\n\n2, RTX 4090, 24564\n"
    gpus = parse_nvidia_smi(text)
    assert [(g.index, g.name) for g in gpus] == [(2, "RTX 4090"), (3, "Odd, Name")]
    assert gpus[1].memory_gib == 0.0  # unknown, not a crash


@pytest.fixture
def no_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "_mps_available", lambda: False)


CPU = CpuFacts("a CPU described", 64.0)


def test_detect_machine_with_gpus(monkeypatch: pytest.MonkeyPatch, no_mps: None) -> None:
    monkeypatch.setattr(hardware, "_query_nvidia_smi", lambda: SMI)
    monkeypatch.setattr(hardware, "detect_cpu", lambda env: CPU)
    machine = detect_machine({"CUDA_VISIBLE_DEVICES": "1"})
    assert machine == Machine(
        gpus=parse_nvidia_smi(SMI),
        mps_available=False,
        cuda_visible_devices="1",
        world_size=1,
        rank=0,
        local_rank=0,
        launched_by="python",
        cpu=CPU,
    )


def test_no_nvidia_smi_means_no_gpus(monkeypatch: pytest.MonkeyPatch, no_mps: None) -> None:
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    assert detect_machine({}).gpus == ()


@pytest.mark.parametrize("failure", ["rc", "raise", "timeout"])
def test_failing_nvidia_smi_means_no_gpus(monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess:
        assert cmd[1:] == list(hardware.NVIDIA_SMI_QUERY)
        if failure == "raise":
            raise OSError("exec format error")
        if failure == "timeout":
            raise subprocess.TimeoutExpired(cmd, 15)
        return subprocess.CompletedProcess(cmd, 9, stdout=SMI, stderr="driver mismatch")

    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(hardware.subprocess, "run", fake_run)
    assert hardware._query_nvidia_smi() == ""


def test_nvidia_smi_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        hardware.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=SMI, stderr=""),
    )
    assert hardware._query_nvidia_smi() == SMI


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [("Darwin", "arm64", True), ("Darwin", "x86_64", False), ("Linux", "aarch64", False)],
)
def test_mps_from_platform(
    monkeypatch: pytest.MonkeyPatch, system: str, machine: str, expected: bool
) -> None:
    monkeypatch.setattr(hardware.platform, "system", lambda: system)
    monkeypatch.setattr(hardware.platform, "machine", lambda: machine)
    assert hardware._mps_available() is expected


@pytest.mark.parametrize(
    ("env", "launched_by", "world_size", "local_rank"),
    [
        ({}, "python", 1, 0),
        ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, "torchrun", 2, 1),
        ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, "torchrun", 1, 0),
        (
            {
                "TORCHELASTIC_RUN_ID": "x",
                "ACCELERATE_MIXED_PRECISION": "bf16",
                "WORLD_SIZE": "4",
                "LOCAL_RANK": "3",
            },
            "accelerate",
            4,
            3,
        ),
        # accelerate with one process sets no LOCAL_RANK: a plain process to accelerate too.
        ({"ACCELERATE_MIXED_PRECISION": "no"}, "python", 1, 0),
        (
            {"CROSS_RANK": "0", "LOCAL_SIZE": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            "deepspeed",
            2,
            0,
        ),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, "other", 2, 1),
    ],
)
def test_launcher_from_env(
    monkeypatch: pytest.MonkeyPatch,
    no_mps: None,
    env: dict[str, str],
    launched_by: str,
    world_size: int,
    local_rank: int,
) -> None:
    monkeypatch.setattr(hardware, "_query_nvidia_smi", lambda: "")
    machine = detect_machine(env)
    assert (machine.launched_by, machine.world_size, machine.local_rank) == (
        launched_by,
        world_size,
        local_rank,
    )


def test_bad_env_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "_query_nvidia_smi", lambda: "")
    with pytest.raises(RecipeError, match="WORLD_SIZE"):
        detect_machine({"WORLD_SIZE": "two"})


def test_detected_machine_feeds_the_planner(monkeypatch: pytest.MonkeyPatch, no_mps: None) -> None:
    # FIELD-NOTES 1 end to end: two GPUs detected, model fits one -> n_gpu 1, idle warning.
    monkeypatch.setattr(hardware, "_query_nvidia_smi", lambda: SMI)
    m = detect_machine({})
    plan = plan_placement(
        PlacementRequest(
            machine_gpus=m.gpus,
            mps_available=m.mps_available,
            cuda_visible_devices=m.cuda_visible_devices,
            world_size=m.world_size,
            local_rank=m.local_rank,
            launched_by=m.launched_by,
            model_gib=20,
        )
    )
    assert (plan.mode, plan.device_map, plan.n_gpu) == ("single", {"": 0}, 1)
    assert "parallel=ddp" in plan.warnings[0]


# --------------------------------------------------------------------------- profiles


def test_profile_list_shape() -> None:
    profile = {
        "name": "2x-rtx6000-ada",
        "gpus": [
            {"name": "RTX 6000 Ada", "memory_gib": 48},
            {"name": "RTX 6000 Ada", "memory_gib": 48},
        ],
    }
    assert profile_gpus(profile) == (
        GpuInfo(0, "RTX 6000 Ada", 48.0),
        GpuInfo(1, "RTX 6000 Ada", 48.0),
    )


def test_profile_count_in_entry() -> None:
    gpus = profile_gpus({"gpus": [{"name": "H100", "memory_gib": 80, "count": 8}]})
    assert [g.index for g in gpus] == list(range(8))


def test_profile_flat_shape() -> None:
    profile = {"gpu_count": 2, "gpu_name": "L4", "gpu_memory_gib": 24}
    assert profile_gpus(profile) == (GpuInfo(0, "L4", 24.0), GpuInfo(1, "L4", 24.0))


@pytest.mark.parametrize("profile", [{"name": "laptop"}, {"gpus": []}, {"gpu_count": 0}])
def test_profile_cpu_only(profile: dict) -> None:
    assert profile_gpus(profile) == ()


@pytest.mark.parametrize(
    "profile",
    [
        {"gpus": [{"name": "x"}]},
        {"gpus": [{"name": "x", "memory_gib": -1}]},
        {"gpus": [{"name": "x", "memory_gib": 8, "count": 0}]},
        {"gpus": "A100"},
        {"gpus": ["A100"]},
        {"gpu_count": 2},
        {"gpu_count": "2", "gpu_memory_gib": 8},
        {"gpu_count": 1, "gpu_memory_gib": 8, "gpus": []},
    ],
)
def test_profile_errors(profile: dict) -> None:
    with pytest.raises(RecipeError):
        profile_gpus(profile)


def test_profile_accepts_omegaconf() -> None:
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({"gpus": [{"name": "A100", "memory_gib": 40, "count": 2}]})
    assert len(profile_gpus(cfg)) == 2
    assert parse_gpus(omegaconf.OmegaConf.create({"g": [6, 7]}).g) == (6, 7)


# --------------------------------------------------------------------------- gpus=


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("null", None),
        (6, (6,)),
        (0, (0,)),
        ([6, 7], (6, 7)),
        ((7, 6), (7, 6)),  # order kept: it is the CUDA_VISIBLE_DEVICES order
        ("6,7", (6, 7)),
        (" 6 , 7 ", (6, 7)),
        ("[6,7]", (6, 7)),
        ("3", (3,)),
        (["6", "7"], (6, 7)),
    ],
)
def test_parse_gpus(value: object, expected: tuple[int, ...] | None) -> None:
    assert parse_gpus(value) == expected


@pytest.mark.parametrize(
    "value", [True, -1, 1.5, "a,b", "6;7", "6,,7", [6, 6], [], [-1], {"a": 1}, "cuda:0", [True]]
)
def test_parse_gpus_errors_name_the_key(value: object) -> None:
    with pytest.raises(RecipeError) as info:
        parse_gpus(value)
    assert info.value.key == "gpus"
    assert "gpus" in str(info.value)
