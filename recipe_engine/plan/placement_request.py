"""What placement decides on and what it decides: `PlacementRequest` (plain data from the
recipe and the machine) in, `PlacementPlan` out, or `PlacementRefused` with the fix; the
helpers every mode's planner shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from recipe_engine.config.choices import Device, Parallel, values
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.resolve.machine import GpuInfo

PARALLEL_MODES = values(Parallel)
# Where each sharded mode has run in this project's tests and GPU sessions, as `plan` says it (a
# claim is made only for what ran; docs/placement.md's table "Where each has run" links the
# runs): DeepSpeed on CPU runs as 2 gloo processes (tests/cli/test_run_sharded.py); on CUDA
# DeepSpeed (ZeRO-2, ZeRO-3) and FSDP committed on one GPU in one process. No multi-GPU machine
# has been lent.
WHERE_IT_RAN = {
    ("deepspeed", "cpu"): "parallel: deepspeed on CPU ran in this project's tests (2 gloo "
    "processes, ZeRO-2 and ZeRO-3, full fine-tune and QLoRA, DS_ACCELERATOR=cpu)",
    ("deepspeed", "cuda"): "parallel: deepspeed on CUDA committed in this project on one GPU, "
    "one process (ZeRO-2 QLoRA, ZeRO-3 full), not yet across several GPUs (docs/placement.md)",
    ("fsdp", "cuda"): "parallel: fsdp on CUDA committed in this project on one GPU, one process, "
    "not yet across several GPUs (docs/placement.md); accelerate does not shard on CPU",
}
DEVICES = values(Device)
QUANTIZATIONS = ("none", "4bit", "8bit")
LAUNCHERS = ("python", "torchrun", "accelerate", "deepspeed", "other")
ON_UNSUPPORTED = ("error", "skip")
DEEPSPEED_STAGES = (0, 1, 2, 3)

# Fraction of a GPU's memory accelerate may fill with weights under a balanced device_map
# (max_memory); the rest is left for activations, the CUDA context, etc.
MEMORY_FRACTION = 0.9

# Hydra override spellings used in messages: one place to change if the config schema moves.
K_DEVICE = "device"
K_GPUS = "gpus"
K_PARALLEL = "parallel"
K_NPROC = "nproc"
K_QUANT = "quantization"
K_QUANT_STORAGE = "quantization.bnb_4bit_quant_storage"
K_ON_UNSUPPORTED = "quantization.on_unsupported"
K_DS_STAGE = "stage.<name>.train.deepspeed.zero_optimization.stage"  # planner names it


@dataclass(frozen=True)
class PlacementRequest:
    """Everything the planner needs, as plain data (from the recipe and `hardware.Machine`)."""

    device: str = "auto"
    gpus: tuple[int, ...] | None = None
    parallel: str = "auto"
    # Processes for ddp/fsdp/deepspeed; default one per selected GPU; required >= 2 for cpu ddp.
    nproc: int | None = None
    # Nodes a scheduler gives the stage: `nproc` processes on each.
    nodes: int = 1
    scheduled: bool = False  # the launcher's scheduler sizes and starts the stage's job
    node_starter: str = ""  # what starts its processes on each node (the launcher says)
    machine_gpus: tuple[GpuInfo, ...] = ()
    # machine_gpus describe a hardware profile = the GPUs this job gets; `gpus` indices are then
    # not checked against them, only their count must match.
    from_profile: bool = False
    cuda_visible_devices: str | None = None
    mps_available: bool = False
    world_size: int = 1
    local_rank: int = 0
    launched_by: str = "python"
    quantization: str = "none"
    quant_storage_set: bool = False
    on_unsupported: str = "error"
    deepspeed_stage: int | None = None
    # The stage's estimated training peak on one device (plan.memory: weights, optimizer,
    # activations, logits and the CUDA runtime's overhead), compared with a GPU's whole memory.
    model_gib: float = 0.0  # 0 = unknown: fit checks are skipped
    # What would make it fit (plan.memory_fit.fit_advice), named in a refusal.
    memory_advice: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacementPlan:
    """The resolved placement; see `describe` for the human form."""

    device: str
    mode: str
    device_map: dict[str, int | str] | str | None
    max_memory: dict[int, str] | None
    n_gpu: int
    world_size: int
    nproc: int
    starter: str  # what starts the processes: none | external | self-torchrun | scheduler
    cuda_visible_devices: str | None
    visible_gpus: tuple[int, ...]
    quantization: str
    quantization_fallback: str | None
    use_cpu: bool
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


class PlacementRefused(RecipeError):
    """A placement that cannot work; the message names the nearest working alternative."""


def check_choice(value: object, options: tuple, key: str) -> None:
    if value not in options:
        hint = did_you_mean(str(value), [str(o) for o in options])
        listing = ", ".join(str(o) for o in options)
        raise RecipeError(f"`{key}={value}` is not one of: {listing}.{hint}", key=key)


def gib(x: float) -> str:
    return f"{x:.1f} GiB"


def ids(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in indices)


def parse_cvd(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries; '' or '-1' hide every GPU."""
    entries = [e.strip() for e in value.split(",") if e.strip()]
    # CUDA stops at the first invalid entry; -1 is the conventional "no GPU".
    out: list[str] = []
    for e in entries:
        if e.lstrip("-").isdigit() and int(e) < 0:
            break
        out.append(e)
    return out


def fits(model_gib: float, gpus: list[GpuInfo]) -> bool:
    """Does the stage fit each of these GPUs on its own? Unknown sizes count as fitting.
    The estimate holds the runtime's own overhead already: no further margin here."""
    known = [g.memory_gib for g in gpus if g.memory_gib > 0]
    if model_gib <= 0 or not known:
        return True
    return model_gib <= min(known)


def fits_across(model_gib: float, gpus: list[GpuInfo]) -> bool:
    known = [g.memory_gib for g in gpus if g.memory_gib > 0]
    if model_gib <= 0 or len(known) < len(gpus):
        return True
    return model_gib <= sum(known)


def advice(req: PlacementRequest) -> str:
    if not req.memory_advice:
        return ""
    return " To fit, change: " + "; or ".join(req.memory_advice) + "."


def max_memory(gpus: list[GpuInfo]) -> dict[int, str] | None:
    # Keys are in-process CUDA ordinals (after CUDA_VISIBLE_DEVICES), not physical indices.
    if any(g.memory_gib <= 0 for g in gpus):
        return None
    return {i: f"{int(MEMORY_FRACTION * g.memory_gib)}GiB" for i, g in enumerate(gpus)}


def no_fit_message(req: PlacementRequest, gpus: list[GpuInfo], what: str) -> str:
    one = max((g.memory_gib for g in gpus), default=0.0)
    total = sum(g.memory_gib for g in gpus)
    alts = []
    if req.quantization == "none":
        alts.append(f"`{K_QUANT}=4bit`")
    if len(req.machine_gpus) > len(gpus) and not req.from_profile:
        alts.append(f"more GPUs (`{K_GPUS}=...` or drop `{K_GPUS}`)")
    alts.append(f"`{K_PARALLEL}=fsdp` / `{K_PARALLEL}=deepspeed` with CPU offload")
    return (
        f"The stage needs about {gib(req.model_gib)} but {what}: one GPU has "
        f"{gib(one)}, all {len(gpus)} together {gib(total)}. Instead try "
        + ", or ".join(alts)
        + "."
        + advice(req)
    )


# Why FSDP is refused on CPU, as the libraries behave there: accelerate enables FSDP only for
# a multi-GPU (or other accelerator) state; a CPU process group is MULTI_CPU, so a 2-process
# torchrun of SFTTrainer with `fsdp="full_shard auto_wrap"` and `use_cpu=True` trains, but
# wraps the model in DistributedDataParallel: no shard (accelerate 1.15 `AcceleratorState`,
# transformers 5.23; measured).
CPU_REASONS = {
    "fsdp": " (accelerate turns FSDP on only for GPUs and other accelerators; on CPU the "
    "Trainer would train a full replica per process, as DDP: nothing would be sharded)",
}


def refuse_mode_on(device: str, parallel: str, alt: str) -> PlacementRefused:
    why = CPU_REASONS.get(parallel, "") if device == "cpu" else ""
    return PlacementRefused(
        f"`{K_PARALLEL}={parallel}` cannot run on `{K_DEVICE}={device}`{why}. Use {alt} instead.",
        key=K_PARALLEL,
    )


@dataclass(frozen=True)
class Processes:
    """How many processes train, this node's share of them, and who starts them."""

    world_size: int
    nproc: int
    starter: str  # none | external | self-torchrun | scheduler


@dataclass(frozen=True)
class SharedPlacement:
    """What every mode's plan has in common, decided before the mode is."""

    device: str
    cuda_visible_devices: str | None
    quantization: str
    quantization_fallback: str | None
    use_cpu: bool
    n_gpu: int
    visible_gpus: tuple[int, ...]


@dataclass
class ModeContext:
    """What every mode planner needs; `shared` holds the plan's fields decided before the mode,
    `warnings` / `notes` collect what each step has to say."""

    req: PlacementRequest
    device: str
    visible: list[GpuInfo]
    external: bool
    quant: str
    warnings: list[str]
    notes: list[str]
    shared: SharedPlacement

    def plan(
        self,
        mode: str,
        device_map: dict[str, int | str] | str | None,
        max_memory: dict[int, str] | None,
        processes: Processes,
    ) -> PlacementPlan:
        shared, world_size = self.shared, processes.world_size
        nproc, starter = processes.nproc, processes.starter
        return PlacementPlan(
            device=shared.device,
            mode=mode,
            device_map=device_map,
            max_memory=max_memory,
            n_gpu=shared.n_gpu,
            world_size=world_size,
            nproc=nproc,
            starter=starter,
            cuda_visible_devices=shared.cuda_visible_devices,
            visible_gpus=shared.visible_gpus,
            quantization=shared.quantization,
            quantization_fallback=shared.quantization_fallback,
            use_cpu=shared.use_cpu,
            warnings=tuple(self.warnings),
            notes=tuple(self.notes),
        )
