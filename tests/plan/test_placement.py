"""Placement planner: FIELD-NOTES scenarios as a table, plus a sweep over every combination."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.plan.placement import (
    PARALLEL_MODES,
    GpuInfo,
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    describe,
    plan_placement,
)


def gpus(n: int, gib: float = 24.0, start: int = 0) -> tuple[GpuInfo, ...]:
    return tuple(GpuInfo(index=start + i, name="RTX 4090", memory_gib=gib) for i in range(n))


TWO = gpus(2)
EIGHT = gpus(8, 80.0)
TORCHRUN = {"world_size": 2, "local_rank": 1, "launched_by": "torchrun"}
# An override the user can type, in backticks: `parallel=ddp`, `quantization=4bit`, ...
OVERRIDE = re.compile(r"`[\w.\-]+=[^`]+`")


def _req(**kw) -> PlacementRequest:
    return PlacementRequest(**kw)


# Each row: request fields, then either the expected plan fields or (PlacementRefused, words
# the message must contain).
SCENARIOS = [
    pytest.param(
        # FIELD-NOTES 1: two visible GPUs, model fits one -> one GPU, n_gpu forced to 1.
        dict(machine_gpus=TWO, model_gib=8, quantization="4bit"),
        dict(mode="single", device="cuda", device_map={"": 0}, n_gpu=1, starter="none"),
        id="fieldnotes1-two-gpus-fits-one",
    ),
    pytest.param(
        # FIELD-NOTES 2: an explicit device wins over detection.
        dict(device="cpu", machine_gpus=TWO, mps_available=True, model_gib=8),
        dict(device="cpu", mode="single", device_map={"": "cpu"}, n_gpu=0, use_cpu=True),
        id="fieldnotes2-device-cpu-wins",
    ),
    pytest.param(
        dict(device="mps", machine_gpus=(), mps_available=True),
        dict(device="mps", mode="single", device_map={"": "mps"}, n_gpu=0, use_cpu=False),
        id="mps-single",
    ),
    pytest.param(
        dict(device="mps", mps_available=False),
        (PlacementRefused, ["MPS is not available", "`device=cpu`"]),
        id="mps-missing",
    ),
    pytest.param(
        dict(device="cuda", machine_gpus=()),
        (PlacementRefused, ["no NVIDIA GPU", "`device=cpu`"]),
        id="cuda-missing",
    ),
    pytest.param(
        dict(device="cuda", machine_gpus=TWO, cuda_visible_devices=""),
        (PlacementRefused, ["hides all 2 GPU(s)"]),
        id="cuda-hidden-by-cvd",
    ),
    pytest.param(
        # FIELD-NOTES 3: device_map auto under torchrun -> DDP, each rank its own GPU.
        dict(machine_gpus=TWO, model_gib=8, **TORCHRUN),
        dict(mode="ddp", device_map={"": 1}, n_gpu=1, starter="external", world_size=2, nproc=2),
        id="fieldnotes3-auto-under-torchrun-is-ddp",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="model_parallel", model_gib=8, **TORCHRUN),
        (PlacementRefused, ["sharded device_map under DDP", "`parallel=ddp`"]),
        id="fieldnotes3-model-parallel-under-torchrun",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="model_parallel", quantization="4bit", **TORCHRUN),
        (PlacementRefused, ["4bit spread over several devices in a distributed mode"]),
        id="fieldnotes3-4bit-spread-under-torchrun",
    ),
    pytest.param(
        # One process under torchrun is still distributed for accelerate (LOCAL_RANK set).
        dict(machine_gpus=TWO, parallel="model_parallel", launched_by="torchrun"),
        (PlacementRefused, ["model_parallel", "`parallel=ddp`"]),
        id="model-parallel-under-one-process-torchrun",
    ),
    pytest.param(
        # FIELD-NOTES 4: 4-bit on MPS refused by default ...
        dict(device="mps", mps_available=True, quantization="4bit"),
        (PlacementRefused, ["not plan bitsandbytes 4bit", "`quantization.on_unsupported=skip`"]),
        id="fieldnotes4-4bit-on-mps-refused",
    ),
    pytest.param(
        # ... and falls back, recorded, only when asked.
        dict(device="mps", mps_available=True, quantization="4bit", on_unsupported="skip"),
        dict(device="mps", quantization="none", mode="single"),
        id="fieldnotes4-4bit-on-mps-skip",
    ),
    pytest.param(
        dict(device="cpu", quantization="4bit"),
        dict(device="cpu", quantization="4bit", quantization_fallback=None),
        id="4bit-on-cpu-allowed",
    ),
    pytest.param(
        dict(device="cpu", gpus=(0,), machine_gpus=TWO),
        (PlacementRefused, ["drop `gpus`", "`device=cuda`"]),
        id="gpus-with-device-cpu",
    ),
    pytest.param(
        dict(device="mps", gpus=(0,), mps_available=True),
        (PlacementRefused, ["drop `gpus`"]),
        id="gpus-with-device-mps",
    ),
    pytest.param(
        dict(gpus=(6, 7), machine_gpus=TWO),
        (PlacementRefused, ["6,7", "it has: 0,1", "nvidia-smi", "`gpus=0,1`"]),
        id="missing-gpus",
    ),
    pytest.param(
        dict(gpus=(6, 7), machine_gpus=EIGHT, model_gib=20),
        dict(cuda_visible_devices="6,7", visible_gpus=(6, 7), mode="single", device_map={"": 0}),
        id="gpus-sets-cvd",
    ),
    pytest.param(
        dict(gpus=(6, 7), machine_gpus=EIGHT, cuda_visible_devices="4,5,6,7"),
        dict(cuda_visible_devices="6,7", visible_gpus=(6, 7)),
        id="gpus-subset-of-cvd",
    ),
    pytest.param(
        dict(gpus=(1, 2), machine_gpus=EIGHT, cuda_visible_devices="4,5,6,7"),
        (PlacementRefused, ["allows only 4, 5, 6, 7", "`gpus=4,5`"]),
        id="gpus-outside-cvd",
    ),
    pytest.param(
        # No gpus: leave the environment alone and plan over what it shows.
        dict(machine_gpus=EIGHT, cuda_visible_devices="3", model_gib=20),
        dict(cuda_visible_devices=None, visible_gpus=(3,), warnings=()),
        id="cvd-respected-without-gpus",
    ),
    pytest.param(
        dict(machine_gpus=EIGHT, cuda_visible_devices="GPU-aaa,GPU-bbb"),
        dict(visible_gpus=(0, 1), mode="single"),
        id="cvd-uuids",
    ),
    pytest.param(
        # A hardware profile: indices are the target machine's; only the count must match.
        dict(gpus=(6, 7), machine_gpus=gpus(2, 48.0), from_profile=True, parallel="ddp"),
        dict(visible_gpus=(6, 7), nproc=2, starter="self-torchrun", cuda_visible_devices="6,7"),
        id="profile-gpus-count-matches",
    ),
    pytest.param(
        dict(gpus=(6,), machine_gpus=gpus(2, 48.0), from_profile=True),
        (PlacementRefused, ["profile describes 2", "`gpus=0,1`"]),
        id="profile-gpus-count-mismatch",
    ),
    pytest.param(
        # Model too big for one GPU, fits across: model parallel in ONE process, n_gpu 1.
        dict(machine_gpus=TWO, model_gib=30),
        dict(
            mode="model_parallel",
            device_map="balanced",
            max_memory={0: "21GiB", 1: "21GiB"},
            n_gpu=1,
            nproc=1,
            starter="none",
        ),
        id="auto-model-parallel",
    ),
    pytest.param(
        dict(machine_gpus=TWO, model_gib=100),
        # The stage's estimated peak (runtime overhead included) against the GPUs' whole
        # memory: 48 GiB together (before the memory estimate: 90% of it, 43.2 GiB).
        (PlacementRefused, ["100.0 GiB", "48.0 GiB", "`quantization=4bit`"]),
        id="auto-fits-nowhere",
    ),
    pytest.param(
        dict(machine_gpus=gpus(1), parallel="model_parallel"),
        (PlacementRefused, ["`parallel=single`"]),
        id="model-parallel-one-gpu",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="single", model_gib=30),
        (PlacementRefused, ["`parallel=model_parallel`", "`quantization=4bit`"]),
        id="single-too-big",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="ddp", model_gib=8),
        dict(
            mode="ddp",
            nproc=2,
            world_size=2,
            starter="self-torchrun",
            device_map={"": 0},
            warnings=(),
        ),
        id="ddp-self-torchrun",
    ),
    pytest.param(
        dict(machine_gpus=EIGHT, parallel="ddp", nproc=2),
        dict(mode="ddp", nproc=2, starter="self-torchrun"),
        id="ddp-fewer-procs-than-gpus",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="ddp", nproc=3),
        (PlacementRefused, ["`nproc=2`"]),
        id="ddp-more-procs-than-gpus",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="ddp", model_gib=30),
        (PlacementRefused, ["full replica", "`parallel=fsdp`"]),
        id="ddp-too-big",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="ddp", quantization="4bit"),
        dict(mode="ddp", quantization="4bit", device_map={"": 0}),
        id="ddp-4bit-fine",
    ),
    pytest.param(
        dict(device="cpu", parallel="ddp", nproc=2),
        dict(mode="ddp", device_map={"": "cpu"}, nproc=2, starter="self-torchrun", n_gpu=0),
        id="cpu-ddp",
    ),
    pytest.param(
        dict(device="cpu", parallel="ddp"),
        (PlacementRefused, ["`nproc=2`"]),
        id="cpu-ddp-needs-nproc",
    ),
    pytest.param(
        dict(device="mps", mps_available=True, parallel="ddp"),
        (PlacementRefused, ["`parallel=single`"]),
        id="mps-ddp",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="ddp", nproc=4, **TORCHRUN),
        (PlacementRefused, ["started 2", "Drop `nproc`"]),
        id="nproc-vs-launcher",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="fsdp"),
        dict(mode="fsdp", device_map=None, starter="self-torchrun", nproc=2, n_gpu=1),
        id="fsdp",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="fsdp", quantization="4bit"),
        (PlacementRefused, ["`quantization.bnb_4bit_quant_storage=bfloat16`"]),
        id="fsdp-4bit-needs-storage",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="fsdp", quantization="4bit", quant_storage_set=True),
        dict(mode="fsdp", device_map=None, quantization="4bit"),
        id="fsdp-4bit-with-storage",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="fsdp", quantization="8bit"),
        (PlacementRefused, ["8bit", "FSDP"]),
        id="fsdp-8bit",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="deepspeed", deepspeed_stage=3, quantization="8bit"),
        (PlacementRefused, ["ZeRO-3"]),
        id="zero3-8bit",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="deepspeed", deepspeed_stage=3, quantization="4bit"),
        (PlacementRefused, ["`quantization.bnb_4bit_quant_storage=bfloat16`"]),
        id="zero3-4bit-needs-storage",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="deepspeed", deepspeed_stage=2, quantization="8bit"),
        dict(mode="deepspeed", device_map=None, quantization="8bit"),
        id="zero2-8bit-allowed",
    ),
    pytest.param(
        dict(machine_gpus=gpus(1), parallel="deepspeed", deepspeed_stage=3),
        dict(mode="deepspeed", nproc=1, starter="self-torchrun"),
        id="deepspeed-one-gpu-still-launched",
    ),
    pytest.param(
        dict(device="cpu", parallel="fsdp"),
        # Measured: SFTTrainer on CPU trains `fsdp` as DDP (nothing sharded), so it is refused.
        (PlacementRefused, ["`device=cuda`", "FSDP on only for GPUs", "as DDP"]),
        id="fsdp-on-cpu",
    ),
    pytest.param(
        dict(device="cpu", parallel="deepspeed", nproc=2, deepspeed_stage=3),
        # DeepSpeed's CPU accelerator: accelerate starts DeepSpeed only without use_cpu.
        dict(mode="deepspeed", device_map=None, nproc=2, use_cpu=False, n_gpu=0),
        id="deepspeed-on-cpu",
    ),
    pytest.param(
        dict(device="cpu", parallel="deepspeed"),
        (PlacementRefused, ["`parallel=deepspeed` on CPU", "`nproc=2`"]),
        id="cpu-deepspeed-needs-nproc",
    ),
    pytest.param(
        dict(machine_gpus=TWO, parallel="single", **TORCHRUN),
        (PlacementRefused, ["`parallel=ddp`"]),
        id="single-under-torchrun",
    ),
    pytest.param(
        # Already 4-bit: do not suggest 4-bit again.
        dict(machine_gpus=gpus(1), parallel="single", quantization="4bit", model_gib=30),
        (PlacementRefused, ["`parallel=fsdp`"]),
        id="single-too-big-already-4bit",
    ),
    pytest.param(
        dict(device="mps", mps_available=True, **TORCHRUN),
        (PlacementRefused, ["plain `python`", "`device=cpu`"]),
        id="mps-under-torchrun",
    ),
    pytest.param(
        # torchrun with one process: single GPU, but still "external" (no sharded map, no relaunch).
        dict(machine_gpus=TWO, launched_by="torchrun", model_gib=8),
        dict(mode="single", device_map={"": 0}, starter="external", warnings=()),
        id="torchrun-one-process",
    ),
    pytest.param(
        dict(machine_gpus=TWO, launched_by="torchrun", model_gib=30),
        (PlacementRefused, ["plain `python`", "`quantization=4bit`"]),
        id="torchrun-one-process-too-big",
    ),
    pytest.param(
        dict(machine_gpus=gpus(1), parallel="ddp", **TORCHRUN),
        (PlacementRefused, ["share a GPU", "`--nproc_per_node=1`"]),
        id="two-ranks-one-gpu",
    ),
]


@pytest.mark.parametrize(("request_fields", "expected"), SCENARIOS)
def test_scenarios(request_fields: dict, expected: dict | tuple) -> None:
    req = _req(**request_fields)
    if isinstance(expected, tuple):
        exc, words = expected
        with pytest.raises(exc) as info:
            plan_placement(req)
        for word in words:
            assert word.lower() in str(info.value).lower()
        return
    plan = plan_placement(req)
    for field, value in expected.items():
        assert getattr(plan, field) == value, field
    _check_invariants(req, plan)


def test_idle_gpu_warning_names_ddp() -> None:
    plan = plan_placement(_req(machine_gpus=TWO, model_gib=8))
    assert len(plan.warnings) == 1
    assert "GPU(s) 1 stay idle" in plan.warnings[0] and "`parallel=ddp`" in plan.warnings[0]


def test_model_parallel_note_says_one_process() -> None:
    plan = plan_placement(_req(machine_gpus=TWO, model_gib=30))
    assert any("ONE process" in n and "n_gpu=1" in n for n in plan.notes)


def test_mps_skip_is_recorded() -> None:
    plan = plan_placement(
        _req(device="mps", mps_available=True, quantization="8bit", on_unsupported="skip")
    )
    assert plan.quantization == "none"
    assert plan.quantization_fallback and "8bit" in plan.quantization_fallback
    assert any("WITHOUT quantization" in w for w in plan.warnings)
    assert any("fallback" in line for line in describe(plan))


@pytest.mark.parametrize(
    "fields",
    [
        dict(device="gpu"),
        dict(parallel="dp"),
        dict(quantization="int4"),
        dict(nproc=0),
        dict(world_size=2, local_rank=2),
        dict(model_gib=-1.0),
        dict(parallel="deepspeed", deepspeed_stage=4),
    ],
)
def test_bad_values_are_recipe_errors(fields: dict) -> None:
    with pytest.raises(RecipeError):
        plan_placement(_req(**fields))


def test_typo_suggests_value() -> None:
    with pytest.raises(RecipeError, match="Did you mean `model_parallel`"):
        plan_placement(_req(parallel="model_paralel"))


def test_describe_ddp_mentions_local_rank() -> None:
    lines = describe(plan_placement(_req(machine_gpus=TWO, parallel="ddp")))
    assert any("LOCAL_RANK" in line for line in lines)
    assert any("never DataParallel" in line for line in lines)


def test_describe_says_where_each_sharded_mode_ran() -> None:
    def said(**fields: object) -> list[str]:
        return [line for line in describe(plan_placement(_req(**fields))) if "this project" in line]

    [on_gpu] = said(machine_gpus=TWO, parallel="deepspeed", deepspeed_stage=2)
    assert "deepspeed on CUDA committed" in on_gpu and "not yet across several GPUs" in on_gpu
    assert "docs/placement.md" in on_gpu  # the user guide, which keeps the evidence
    [on_cpu] = said(device="cpu", parallel="deepspeed", nproc=2, deepspeed_stage=3)
    assert "deepspeed on CPU ran" in on_cpu and "ZeRO-3" in on_cpu
    [fsdp] = said(machine_gpus=TWO, parallel="fsdp")
    assert "fsdp on CUDA committed" in fsdp and "not yet across several GPUs" in fsdp
    assert "docs/placement.md" in fsdp
    assert not said(machine_gpus=TWO, parallel="ddp")


def test_modules_do_not_import_torch() -> None:
    # Importing torch initialises nothing by itself, but the planner must stay torch-free so
    # CUDA_VISIBLE_DEVICES can still be set after planning.
    root = Path(__file__).resolve().parents[2]
    for name in ("placement.py", "hardware.py", "dag.py", "recipe_plan.py", "render.py"):
        source = (root / "recipe_engine" / "plan" / name).read_text()
        assert not re.search(r"^\s*(import|from)\s+torch\b", source, re.M), name
    # The whole planner imports torch only when it builds a meta model (never on import).
    code = "import sys, recipe_engine.plan.planner; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


# --------------------------------------------------------------------------- the sweep


def _check_invariants(req: PlacementRequest, plan: PlacementPlan) -> None:
    """What must hold for every plan the planner returns."""
    assert plan.n_gpu <= 1  # never DataParallel
    assert plan.n_gpu == (1 if plan.device == "cuda" else 0)
    if req.device != "auto":
        assert plan.device == req.device
    assert plan.use_cpu == (plan.device == "cpu" and plan.mode != "deepspeed")
    distributed = plan.world_size > 1 or plan.starter == "external"
    if distributed or plan.mode in ("ddp", "fsdp", "deepspeed"):
        assert not isinstance(plan.device_map, str), plan
    if plan.mode in ("fsdp", "deepspeed"):
        assert plan.device_map is None
    if plan.mode == "fsdp":  # accelerate shards only on accelerators
        assert plan.device == "cuda"
    if plan.mode == "ddp" and plan.device == "cuda":
        assert plan.device_map == {"": req.local_rank}
    if plan.mode == "model_parallel":
        assert plan.nproc == 1 and len(plan.visible_gpus) >= 2 and plan.starter == "none"
    if plan.device == "cpu":
        assert plan.device_map in ({"": "cpu"}, None)
    if plan.device == "mps":
        assert plan.mode == "single" and plan.quantization == "none"
    if plan.device != "cuda":
        assert plan.visible_gpus == ()
    if req.world_size > 1:
        assert plan.starter == "external" and plan.world_size == req.world_size
    if plan.starter == "self-torchrun":
        assert req.launched_by == "python"
    assert plan.nproc >= 1
    assert describe(plan) and all(isinstance(line, str) for line in describe(plan))


FITS_ONE, FITS_NOT = 10.0, 30.0  # GPUs below are 24 GiB each

SWEEP = list(
    itertools.product(
        ("cpu", "cuda", "mps"),
        (0, 1, 2, 8),
        PARALLEL_MODES,
        ("none", "4bit", "8bit"),
        ("python", "torchrun"),
        (FITS_ONE, FITS_NOT),
    )
)


@pytest.mark.parametrize(("device", "n_gpus", "parallel", "quant", "launch", "model_gib"), SWEEP)
def test_sweep(
    device: str, n_gpus: int, parallel: str, quant: str, launch: str, model_gib: float
) -> None:
    launch_fields = TORCHRUN if launch == "torchrun" else {}
    req = _req(
        device=device,
        machine_gpus=gpus(n_gpus),
        mps_available=True,
        parallel=parallel,
        quantization=quant,
        model_gib=model_gib,
        **launch_fields,
    )
    try:
        plan = plan_placement(req)
    except PlacementRefused as refused:
        message = str(refused)
        assert message.strip()
        assert OVERRIDE.search(message) or "instead" in message, message
        return
    _check_invariants(req, plan)
