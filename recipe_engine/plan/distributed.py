"""ddp / fsdp / deepspeed: one process per GPU (or gloo processes on CPU for ddp), who
launches them, and what sharding asks of quantized weights."""

from __future__ import annotations

from recipe_engine.launchers.registry import submitting_keys
from recipe_engine.plan.placement_request import (
    K_DEVICE,
    K_GPUS,
    K_NPROC,
    K_PARALLEL,
    K_QUANT,
    K_QUANT_STORAGE,
    ModeContext,
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    Processes,
    fits,
    fits_across,
    gib,
    ids,
    no_fit_message,
    refuse_mode_on,
)
from recipe_engine.resolve.machine import GpuInfo

# What trains on CPU, as gloo processes: DDP, and DeepSpeed on its CPU accelerator. FSDP does
# not (placement_request.CPU_REASONS says why).
CPU_MODES = ("ddp", "deepspeed")
CPU_NOTES = {
    "ddp": "CPU DDP uses the gloo backend.",
    "deepspeed": "CPU DeepSpeed: DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu) over gloo, "
    "use_cpu=False (accelerate enables DeepSpeed only then).",
}


def idle_warning(visible: list[GpuInfo], used: int) -> str:
    idle = [g.index for g in visible[used:]]
    return (
        f"GPU(s) {ids(idle)} stay idle: this run uses {used} GPU(s) of {len(visible)} visible. "
        f"To train on all of them set `{K_PARALLEL}=ddp` (one process per GPU), or hide them "
        f"with `{K_GPUS}={ids([g.index for g in visible[:used]])}`."
    )


def process_count(req: PlacementRequest, external: bool) -> int:
    if external and req.nproc is not None and req.nproc * req.nodes != req.world_size:
        on_nodes = f" on each of `nodes={req.nodes}`" if req.nodes > 1 else ""
        raise PlacementRefused(
            f"`{K_NPROC}={req.nproc}`{on_nodes} but the launcher ({req.launched_by}) started "
            f"{req.world_size} process(es). Drop `{K_NPROC}` or relaunch with "
            f"`--nproc_per_node={req.nproc}` instead.",
            key=K_NPROC,
        )
    return req.world_size if external else (req.nproc or 1)


def plan_distributed(c: ModeContext, mode: str) -> PlacementPlan:
    """ddp / fsdp / deepspeed: one process per GPU (or gloo processes on CPU: ddp, deepspeed)."""
    req, device = c.req, c.device
    if device == "mps":
        raise refuse_mode_on(device, mode, f"`{K_PARALLEL}=single`")
    if device == "cpu" and mode not in CPU_MODES:
        raise refuse_mode_on(
            device, mode, f"`{K_DEVICE}=cuda`, or `{K_PARALLEL}=ddp {K_NPROC}=2` on CPU"
        )
    if req.nodes > 1 and not (c.external or req.scheduled):
        raise PlacementRefused(
            f"`nodes={req.nodes}` needs a scheduler to give the stage its nodes: add "
            f"{submitting_keys()}, or start one torchrun per node yourself (docs/cluster.md).",
            key="nodes",
        )
    nproc = _processes(c, mode)
    used = c.visible if c.external else c.visible[:nproc]
    device_map = _device_map(c, mode, used)
    starter = _starter(c, mode, nproc)
    if device == "cpu":
        c.notes.append(CPU_NOTES[mode])
    return c.plan(
        mode=mode,
        device_map=device_map,
        max_memory=None,
        processes=Processes(
            world_size=req.world_size if c.external else nproc * req.nodes,
            nproc=nproc,
            starter=starter,
        ),
    )


def _processes(c: ModeContext, mode: str) -> int:
    """How many processes train: one per visible GPU by default, the launcher's if one
    started them, `nproc` gloo processes on CPU."""
    req, visible = c.req, c.visible
    nproc = process_count(req, c.external)
    if c.device != "cuda":
        if not c.external and (req.nproc or 1) * req.nodes < 2:
            raise PlacementRefused(
                f"`{K_PARALLEL}={mode}` on CPU needs the number of (gloo) processes: set "
                f"`{K_NPROC}=2` or more, or use `{K_PARALLEL}=single` instead.",
                key=K_NPROC,
            )
        return nproc
    if not c.external and req.nproc is None:
        nproc = len(visible)
    if not c.external and nproc > len(visible):
        raise PlacementRefused(
            f"`{K_PARALLEL}={mode} {K_NPROC}={nproc}` needs one GPU per process, but "
            f"{len(visible)} GPU(s) are visible. Use `{K_NPROC}={len(visible)}` instead.",
            key=K_NPROC,
        )
    if c.external and req.local_rank >= len(visible):
        raise PlacementRefused(
            f"LOCAL_RANK={req.local_rank} but this process sees {len(visible)} GPU(s): two "
            f"ranks would share a GPU. Relaunch with `--nproc_per_node={len(visible)}` "
            "instead.",
            key=K_PARALLEL,
        )
    if not c.external and nproc < len(visible):
        c.warnings.append(idle_warning(visible, nproc))
    return nproc


def _device_map(c: ModeContext, mode: str, used: list[GpuInfo]) -> dict[str, int | str] | None:
    req = c.req
    if mode != "ddp":
        _check_sharded_quant(req, mode, c.quant, c.notes)
        sharded = mode == "fsdp" or req.deepspeed_stage == 3
        if c.device == "cuda" and sharded and not fits_across(req.model_gib, used):
            c.warnings.append(
                f"The model (~{gib(req.model_gib)}) exceeds the {len(used)} GPU(s) together; "
                "it only trains with CPU offload enabled."
            )
        return None  # FSDP / DeepSpeed place the parameters themselves.
    if c.device == "cuda" and not fits(req.model_gib, used):
        raise PlacementRefused(
            f"`{K_PARALLEL}=ddp` keeps a full replica on every GPU. "
            + no_fit_message(req, used, "it does not fit one GPU"),
            key=K_PARALLEL,
        )
    if c.quant != "none":
        c.notes.append(f"{c.quant} in DDP: each rank quantizes its own replica on its own device.")
    # Each rank loads its whole replica onto its own device; never a sharded map.
    return {"": req.local_rank} if c.device == "cuda" else {"": "cpu"}


def _starter(c: ModeContext, mode: str, nproc: int) -> str:
    """What starts the stage's processes: none (this one), external (a launcher already did),
    self-torchrun (the engine relaunches itself), scheduler (the launcher's job, on each of
    its nodes: `PlacementRequest.node_starter` says how)."""
    if c.external:
        return "external"
    if c.req.nodes > 1:
        c.notes.append(
            f"{c.req.nodes} nodes: {c.req.node_starter}, {nproc} process(es) each, "
            f"{nproc * c.req.nodes} in all, rendezvous at its first node."
        )
        return "scheduler"
    if mode == "ddp" and nproc == 1:
        c.notes.append("ddp with one process: no gradient sync, same as parallel=single.")
        return "none"
    # FSDP / DeepSpeed need a process group even for one process (Trainer: "fsdp only works
    # in distributed training"), so the engine relaunches itself under torchrun.
    c.notes.append(
        f"The engine relaunches itself with torch.distributed.run, {nproc} process(es); "
        "each replans with its own LOCAL_RANK."
    )
    return "self-torchrun"


def _check_sharded_quant(req: PlacementRequest, mode: str, quant: str, notes: list[str]) -> None:
    """FSDP / ZeRO-3 shard parameters: bitsandbytes weights must be stored in a float dtype."""
    stage3 = mode == "deepspeed" and req.deepspeed_stage == 3
    shards = mode == "fsdp" or stage3
    where = "FSDP" if mode == "fsdp" else "DeepSpeed ZeRO-3"
    if quant == "8bit" and shards:
        raise PlacementRefused(
            f"`{K_QUANT}=8bit` cannot be sharded by {where} (int8 weights). Use "
            f"`{K_QUANT}=4bit {K_QUANT_STORAGE}=bfloat16` instead, or `{K_PARALLEL}=ddp`.",
            key=K_QUANT,
        )
    if quant == "4bit" and shards and not req.quant_storage_set:
        raise PlacementRefused(
            f"`{K_QUANT}=4bit` with {where} needs the packed weights stored in a float dtype so "
            f"they can be sharded. Set `{K_QUANT_STORAGE}=bfloat16` (or use `{K_PARALLEL}=ddp` "
            "instead).",
            key=K_QUANT_STORAGE,
        )
    if quant != "none" and mode == "deepspeed" and req.deepspeed_stage is None:
        notes.append(
            f"DeepSpeed stage unknown: with ZeRO-3, {quant} needs {K_QUANT_STORAGE}=bfloat16."
        )
    if quant != "none" and mode == "deepspeed" and not stage3:
        notes.append(
            f"{quant} under DeepSpeed without ZeRO-3: set the CUDA device to LOCAL_RANK before "
            "loading so bitsandbytes quantizes onto this rank's GPU."
        )
