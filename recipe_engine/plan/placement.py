"""Placement planner: where a model loads, how many processes train it, and what is refused.

Pure data in, pure data out: no torch import, so `plan` and the tests run in milliseconds
on any machine. The guard (elsewhere) enforces the plan against the live Trainer.

Why each rule exists (transformers 5.23 / accelerate 1.15, read from the installed source):

- `TrainingArguments._setup_devices` sets `_n_gpu = torch.cuda.device_count()` in a plain
  single process, and `Trainer._wrap_model` wraps `nn.DataParallel` when `n_gpu > 1`
  (skipped only for 4/8-bit models). `Trainer.__init__` forces `_n_gpu = 1` only when
  `hf_device_map` spans several GPUs or a single GPU other than `args.device`. A bf16 model
  on `{"": 0}` with two visible GPUs therefore gets DataParallel (FIELD-NOTES 1), and
  SFTTrainer refuses DataParallel outright. So every plan carries `n_gpu <= 1`.
- `Accelerator.prepare_model` refuses a model whose `hf_device_map` spans several devices
  whenever `distributed_type != NO`, which is the case as soon as `LOCAL_RANK` is set
  (any torchrun / accelerate / deepspeed process, even with one process). So a sharded
  device_map ("balanced"/"auto") is only planned for a plain single process.
- FSDP and DeepSpeed own placement: the model loads without a device_map.
"""

from __future__ import annotations

from recipe_engine.errors import RecipeError
from recipe_engine.plan.distributed import idle_warning, plan_distributed
from recipe_engine.plan.gpu_selection import select_gpus
from recipe_engine.plan.placement_request import (
    DEEPSPEED_STAGES,
    DEVICES,
    K_DEVICE,
    K_DS_STAGE,
    K_NPROC,
    K_ON_UNSUPPORTED,
    K_PARALLEL,
    K_QUANT,
    LAUNCHERS,
    MEMORY_FRACTION,
    ON_UNSUPPORTED,
    PARALLEL_MODES,
    QUANTIZATIONS,
    WHERE_IT_RAN,
    ModeContext,
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    Processes,
    SharedPlacement,
    advice,
    check_choice,
    fits,
    fits_across,
    gib,
    max_memory,
    no_fit_message,
    refuse_mode_on,
)
from recipe_engine.resolve.machine import GpuInfo

# --------------------------------------------------------------------------- planner


def _validate(req: PlacementRequest) -> None:
    check_choice(req.device, DEVICES, K_DEVICE)
    check_choice(req.parallel, PARALLEL_MODES, K_PARALLEL)
    check_choice(req.quantization, QUANTIZATIONS, K_QUANT)
    check_choice(req.launched_by, LAUNCHERS, "launched_by")
    check_choice(req.on_unsupported, ON_UNSUPPORTED, K_ON_UNSUPPORTED)
    if req.deepspeed_stage is not None:
        check_choice(req.deepspeed_stage, DEEPSPEED_STAGES, K_DS_STAGE)
    if req.nproc is not None and (isinstance(req.nproc, bool) or req.nproc < 1):
        raise RecipeError(f"`{K_NPROC}={req.nproc}` must be a positive integer.", key=K_NPROC)
    if req.world_size < 1 or not 0 <= req.local_rank < max(req.world_size, 1):
        raise RecipeError(
            f"Inconsistent launcher environment: WORLD_SIZE={req.world_size}, "
            f"LOCAL_RANK={req.local_rank}. Launch with torchrun or plain `python` instead."
        )
    if req.model_gib < 0:
        raise RecipeError(f"model size estimate {req.model_gib} GiB is negative.")


def _resolve_device(req: PlacementRequest, visible: list[GpuInfo]) -> str:
    if req.device == "auto":
        # Same order as the Trainer's detector, but decided here, once, and recorded.
        return "cuda" if visible else ("mps" if req.mps_available else "cpu")
    if req.device == "cuda" and not visible:
        if req.machine_gpus and req.cuda_visible_devices is not None:
            why = (
                f"CUDA_VISIBLE_DEVICES={req.cuda_visible_devices!r} hides all "
                f"{len(req.machine_gpus)} GPU(s) of this machine"
            )
        else:
            why = "no NVIDIA GPU was found (`nvidia-smi` lists none)"
        raise PlacementRefused(
            f"`{K_DEVICE}=cuda` was asked for, but {why}. Use `{K_DEVICE}=cpu` instead"
            + (f" (or `{K_DEVICE}=mps`)." if req.mps_available else "."),
            key=K_DEVICE,
        )
    if req.device == "mps" and not req.mps_available:
        alt = f"`{K_DEVICE}=cuda`" if visible else f"`{K_DEVICE}=cpu`"
        raise PlacementRefused(
            f"`{K_DEVICE}=mps` was asked for, but Apple MPS is not available here "
            f"(it needs macOS on Apple Silicon). Use {alt} instead.",
            key=K_DEVICE,
        )
    return req.device


def _resolve_quantization(
    req: PlacementRequest, device: str, warnings: list[str], notes: list[str]
) -> tuple[str, str | None]:
    quant = req.quantization
    if quant == "none":
        return quant, None
    if device == "mps":
        # bitsandbytes 0.50 registers MPS kernels, but QLoRA training on them is unproven: the
        # engine plans it only when asked, so a comparison never changes silently.
        reason = (
            f"the engine does not plan bitsandbytes {quant} quantization on Apple MPS "
            "(its MPS backend is unproven for QLoRA training)"
        )
        if req.on_unsupported == "skip":
            warnings.append(
                f"{reason}: training WITHOUT quantization (recorded in the manifest); memory "
                f"use and results differ from a {quant} run."
            )
            return "none", f"{reason}; skipped because {K_ON_UNSUPPORTED}=skip"
        raise PlacementRefused(
            f"`{K_QUANT}={quant}` on `{K_DEVICE}=mps`: {reason}. Use `{K_QUANT}=none`, or "
            f"`{K_ON_UNSUPPORTED}=skip` to fall back to no quantization (recorded), or "
            f"`{K_DEVICE}=cpu` instead.",
            key=K_QUANT,
        )
    if device == "cpu":
        # bitsandbytes >= 0.48 ships CPU kernels: it works, slowly.
        notes.append(f"{quant} quantization on CPU uses bitsandbytes' CPU kernels (slow).")
    return quant, None


def _resolve_parallel(
    req: PlacementRequest, device: str, visible: list[GpuInfo], external: bool
) -> str:
    """`parallel=auto`: DDP under a launcher's several processes, one device where the stage
    fits, a sharded device_map over this process's GPUs where it fits them together."""
    if req.parallel != "auto":
        return req.parallel
    if external and req.world_size > 1:
        return "ddp"
    if device != "cuda" or fits(req.model_gib, visible):
        return "single"
    if external:
        raise PlacementRefused(
            no_fit_message(req, visible, "it does not fit one GPU")
            + f" (A sharded device_map cannot run under {req.launched_by}; run with plain "
            f"`python` for `{K_PARALLEL}=model_parallel`.)",
            key=K_PARALLEL,
        )
    if len(visible) >= 2 and fits_across(req.model_gib, visible):
        return "model_parallel"
    raise PlacementRefused(no_fit_message(req, visible, "it fits nowhere"), key="model")


def plan_placement(req: PlacementRequest) -> PlacementPlan:
    """Resolve a request into a plan, or raise PlacementRefused with the nearest alternative."""
    _validate(req)
    warnings: list[str] = []
    visible, cvd_out, notes = select_gpus(req)
    device = _resolve_device(req, visible)
    if device != "cuda":
        # GPUs are irrelevant off CUDA; with device=cpu on a GPU box they simply stay unused.
        visible = []
        if req.machine_gpus and req.device == "cpu":
            notes.append("device=cpu: the machine's GPUs are not used.")
    quant, fallback = _resolve_quantization(req, device, warnings, notes)

    # Under any launcher (LOCAL_RANK set) accelerate is in a distributed mode, even with one
    # process: no sharded device_map, and the process count is the launcher's, not ours.
    external = req.launched_by != "python" or req.world_size > 1
    if device == "mps" and req.world_size > 1:
        raise PlacementRefused(
            f"`{K_DEVICE}=mps` trains in one process, but {req.launched_by} started "
            f"{req.world_size}. Launch with plain `python` instead, or use `{K_DEVICE}=cpu` "
            f"(CPU DDP).",
            key=K_DEVICE,
        )
    parallel = _resolve_parallel(req, device, visible, external)
    if req.parallel == "auto":
        notes.append(f"{K_PARALLEL}=auto resolved to {parallel}.")

    ctx = ModeContext(
        req=req,
        device=device,
        visible=visible,
        external=external,
        quant=quant,
        warnings=warnings,
        notes=notes,
        shared=SharedPlacement(
            device=device,
            cuda_visible_devices=cvd_out,
            quantization=quant,
            quantization_fallback=fallback,
            # accelerate enables DeepSpeed only for a state made without cpu=True: on CPU it
            # runs on DeepSpeed's CPU accelerator instead (run.trainer.cpu_deepspeed_state).
            use_cpu=device == "cpu" and parallel != "deepspeed",
            # The whole point: at most one GPU per process, so the Trainer never wraps
            # nn.DataParallel, whatever the library version does on its own.
            n_gpu=1 if device == "cuda" else 0,
            visible_gpus=tuple(g.index for g in visible),
        ),
    )
    if parallel == "single":
        return _plan_single(ctx)
    if parallel == "model_parallel":
        return _plan_model_parallel(ctx)
    return plan_distributed(ctx, parallel)


def _plan_single(c: ModeContext) -> PlacementPlan:
    req, visible = c.req, c.visible
    if c.external and req.world_size > 1:
        raise PlacementRefused(
            f"`{K_PARALLEL}=single` trains in one process, but {req.launched_by} started "
            f"{req.world_size}. Use `{K_PARALLEL}=ddp` instead, or launch with plain `python`.",
            key=K_PARALLEL,
        )
    if not c.external and req.nproc not in (None, 1):
        raise PlacementRefused(
            f"`{K_PARALLEL}=single` runs one process, but `{K_NPROC}={req.nproc}`. Use "
            f"`{K_PARALLEL}=ddp` instead, or drop `{K_NPROC}`.",
            key=K_NPROC,
        )
    device_map: dict[str, int | str]
    if c.device == "cuda":
        # Under a one-process launcher the process owns cuda:LOCAL_RANK (= 0).
        device_map = {"": req.local_rank}
        if not fits(req.model_gib, visible[:1]):
            alts = []
            if len(visible) >= 2 and not c.external:
                alts.append(f"`{K_PARALLEL}=model_parallel` (shards over the {len(visible)} GPUs)")
            if c.quant == "none":
                alts.append(f"`{K_QUANT}=4bit`")
            alts.append(f"`{K_PARALLEL}=fsdp` with CPU offload")
            raise PlacementRefused(
                f"`{K_PARALLEL}=single`: the stage needs about {gib(req.model_gib)} but GPU "
                f"{visible[0].index} has {gib(visible[0].memory_gib)}. Use "
                f"{', or '.join(alts)} instead.{advice(req)}",
                key=K_PARALLEL,
            )
        if len(visible) >= 2 and not c.external:
            c.warnings.append(idle_warning(visible, 1))
    else:
        device_map = {"": c.device}
    return c.plan(
        mode="single",
        device_map=device_map,
        max_memory=None,
        processes=Processes(world_size=1, nproc=1, starter="external" if c.external else "none"),
    )


def _plan_model_parallel(c: ModeContext) -> PlacementPlan:
    req, visible = c.req, c.visible
    if c.device != "cuda":
        raise refuse_mode_on(c.device, "model_parallel", f"`{K_PARALLEL}=single`")
    if c.external:
        what = (
            f"{c.quant} spread over several devices in a distributed mode"
            if c.quant != "none"
            else "a sharded device_map under DDP"
        )
        raise PlacementRefused(
            f"`{K_PARALLEL}=model_parallel` under {req.launched_by} (WORLD_SIZE="
            f"{req.world_size}) would train {what}, which accelerate refuses. Use "
            f"`{K_PARALLEL}=ddp` (model fits one GPU) or `{K_PARALLEL}=fsdp` instead, or run "
            "with plain `python` for model parallel.",
            key=K_PARALLEL,
        )
    if len(visible) < 2:
        raise PlacementRefused(
            f"`{K_PARALLEL}=model_parallel` shards the model over several GPUs, but "
            f"{len(visible)} is visible. Use `{K_PARALLEL}=single` instead.",
            key=K_PARALLEL,
        )
    if req.nproc not in (None, 1):
        raise PlacementRefused(
            f"`{K_PARALLEL}=model_parallel` runs one process, but `{K_NPROC}={req.nproc}`. "
            f"Drop `{K_NPROC}`, or use `{K_PARALLEL}=fsdp` instead.",
            key=K_NPROC,
        )
    if not fits_across(req.model_gib, visible):
        raise PlacementRefused(
            no_fit_message(req, visible, "it does not fit even across the GPUs"), key="model"
        )
    if fits(req.model_gib, visible):
        c.warnings.append(
            "The model fits one GPU; model parallel runs the GPUs one after another. "
            f"`{K_PARALLEL}=ddp` would use all {len(visible)} at once."
        )
    c.notes.append(
        f"Model parallel: device_map='balanced' over {len(visible)} GPUs in ONE process; "
        "the Trainer runs it with n_gpu=1 (no DataParallel), the GPUs work in turn."
    )
    return c.plan(
        mode="model_parallel",
        device_map="balanced",
        max_memory=max_memory(visible),
        processes=Processes(world_size=1, nproc=1, starter="none"),
    )


# --------------------------------------------------------------------------- description


def describe(plan: PlacementPlan) -> list[str]:
    """Human-readable lines for the `plan` verb."""
    lines = []
    if plan.device == "cuda":
        gpus = ", ".join(str(i) for i in plan.visible_gpus)
        lines.append(f"device: cuda (physical GPU(s) {gpus})")
    else:
        lines.append(f"device: {plan.device}" + (" (use_cpu=True)" if plan.use_cpu else ""))
    if plan.cuda_visible_devices is not None:
        lines.append(f"CUDA_VISIBLE_DEVICES={plan.cuda_visible_devices} (set before CUDA starts)")
    launch = {
        "none": "one process",
        "self-torchrun": f"{plan.nproc} process(es) via torch.distributed.run (self-relaunch)",
        "external": f"{plan.world_size} process(es) from an external launcher",
        "scheduler": f"{plan.world_size} process(es), {plan.nproc} on each node, started by "
        "the launcher's job on each (note below)",
    }[plan.starter]
    lines.append(f"mode: {plan.mode}, {launch}")
    if (plan.mode, plan.device) in WHERE_IT_RAN:
        lines.append(WHERE_IT_RAN[plan.mode, plan.device])
    if isinstance(plan.device_map, dict) and plan.mode == "ddp" and plan.device == "cuda":
        dm = "{'': LOCAL_RANK} (each process its own GPU)"
    elif plan.device_map is None:
        dm = f"none ({plan.mode} places the parameters)"
    else:
        dm = repr(plan.device_map)
    lines.append(f"device_map: {dm}")
    if plan.max_memory:
        lines.append("max_memory: " + ", ".join(f"{k}: {v}" for k, v in plan.max_memory.items()))
    lines.append(f"n_gpu: {plan.n_gpu} per process (never DataParallel)")
    quant = plan.quantization
    if plan.quantization_fallback:
        quant += f" (fallback: {plan.quantization_fallback})"
    lines.append(f"quantization: {quant}")
    lines += [f"warning: {w}" for w in plan.warnings]
    lines += [f"note: {n}" for n in plan.notes]
    return lines


# What importers name from here: the request, the plan and its refusal live beside it.
__all__ = [
    "GpuInfo",
    "MEMORY_FRACTION",
    "PARALLEL_MODES",
    "PlacementPlan",
    "PlacementRefused",
    "PlacementRequest",
    "describe",
    "plan_placement",
]
