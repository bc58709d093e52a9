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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.resolve.machine import GpuInfo

PARALLEL_MODES = ("auto", "single", "model_parallel", "ddp", "fsdp", "deepspeed")
# What `plan` says of parallel=deepspeed until a GPU run shows the engine's path works: the
# test machines have no GPU, and the engine (rightly) refuses DeepSpeed on CPU.
DEEPSPEED_EXPERIMENTAL = (
    "parallel: deepspeed (experimental: never run by this project's tests; they run on CPU "
    "only, where the engine refuses DeepSpeed. deepspeed 0.19.8 itself installs there and "
    "trains a toy Trainer with the engine's ZeRO-2 config on its CPU accelerator, but no "
    "stage of this engine has trained under it)"
)
DEVICES = ("auto", "cpu", "cuda", "mps")
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
K_DS_STAGE = "deepspeed.stage"


@dataclass(frozen=True)
class PlacementRequest:
    """Everything the planner needs, as plain data (from the recipe and `hardware.Machine`)."""

    device: str = "auto"
    gpus: tuple[int, ...] | None = None
    parallel: str = "auto"
    # Processes for ddp/fsdp/deepspeed; default one per selected GPU; required >= 2 for cpu ddp.
    nproc: int | None = None
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
    # What would make it fit (plan.memory.fit_advice), named in a refusal.
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
    launcher: str
    cuda_visible_devices: str | None
    visible_gpus: tuple[int, ...]
    quantization: str
    quantization_fallback: str | None
    use_cpu: bool
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


class PlacementRefused(RecipeError):
    """A placement that cannot work; the message names the nearest working alternative."""


# --------------------------------------------------------------------------- helpers


def _check_choice(value: object, options: tuple, key: str) -> None:
    if value not in options:
        hint = did_you_mean(str(value), [str(o) for o in options])
        listing = ", ".join(str(o) for o in options)
        raise RecipeError(f"`{key}={value}` is not one of: {listing}.{hint}", key=key)


def _gib(x: float) -> str:
    return f"{x:.1f} GiB"


def _ids(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in indices)


def _parse_cvd(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries; '' or '-1' hide every GPU."""
    entries = [e.strip() for e in value.split(",") if e.strip()]
    # CUDA stops at the first invalid entry; -1 is the conventional "no GPU".
    out: list[str] = []
    for e in entries:
        if e.lstrip("-").isdigit() and int(e) < 0:
            break
        out.append(e)
    return out


def _fits(model_gib: float, gpus: list[GpuInfo]) -> bool:
    """Does the stage fit each of these GPUs on its own? Unknown sizes count as fitting.
    The estimate holds the runtime's own overhead already: no further margin here."""
    known = [g.memory_gib for g in gpus if g.memory_gib > 0]
    if model_gib <= 0 or not known:
        return True
    return model_gib <= min(known)


def _fits_across(model_gib: float, gpus: list[GpuInfo]) -> bool:
    known = [g.memory_gib for g in gpus if g.memory_gib > 0]
    if model_gib <= 0 or len(known) < len(gpus):
        return True
    return model_gib <= sum(known)


def _advice(req: PlacementRequest) -> str:
    if not req.memory_advice:
        return ""
    return " To fit, change: " + "; or ".join(req.memory_advice) + "."


def _max_memory(gpus: list[GpuInfo]) -> dict[int, str] | None:
    # Keys are in-process CUDA ordinals (after CUDA_VISIBLE_DEVICES), not physical indices.
    if any(g.memory_gib <= 0 for g in gpus):
        return None
    return {i: f"{int(MEMORY_FRACTION * g.memory_gib)}GiB" for i, g in enumerate(gpus)}


# --------------------------------------------------------------------------- planner


def _validate(req: PlacementRequest) -> None:
    _check_choice(req.device, DEVICES, K_DEVICE)
    _check_choice(req.parallel, PARALLEL_MODES, K_PARALLEL)
    _check_choice(req.quantization, QUANTIZATIONS, K_QUANT)
    _check_choice(req.launched_by, LAUNCHERS, "launched_by")
    _check_choice(req.on_unsupported, ON_UNSUPPORTED, K_ON_UNSUPPORTED)
    if req.deepspeed_stage is not None:
        _check_choice(req.deepspeed_stage, DEEPSPEED_STAGES, K_DS_STAGE)
    if req.nproc is not None and (isinstance(req.nproc, bool) or req.nproc < 1):
        raise RecipeError(f"`{K_NPROC}={req.nproc}` must be a positive integer.", key=K_NPROC)
    if req.world_size < 1 or not 0 <= req.local_rank < max(req.world_size, 1):
        raise RecipeError(
            f"Inconsistent launcher environment: WORLD_SIZE={req.world_size}, "
            f"LOCAL_RANK={req.local_rank}. Launch with torchrun or plain `python` instead."
        )
    if req.model_gib < 0:
        raise RecipeError(f"model size estimate {req.model_gib} GiB is negative.")


def _select_gpus(req: PlacementRequest) -> tuple[list[GpuInfo], str | None, list[str]]:
    """The GPUs this process will see (physical indices), the CVD value to set, and notes."""
    notes: list[str] = []
    by_index = {g.index: g for g in req.machine_gpus}
    cvd = None if req.cuda_visible_devices is None else _parse_cvd(req.cuda_visible_devices)

    if req.gpus is not None:
        gpus = tuple(req.gpus)
        if req.device in ("cpu", "mps"):
            raise PlacementRefused(
                f"`{K_GPUS}={_ids(gpus)}` selects GPUs, but `{K_DEVICE}={req.device}` trains on "
                f"{req.device}. Drop `{K_GPUS}` or set `{K_DEVICE}=cuda`.",
                key=K_GPUS,
            )
        if not gpus:
            raise PlacementRefused(
                f"`{K_GPUS}` is empty, which selects no GPU. Drop `{K_GPUS}` to use every "
                f"visible GPU, or set `{K_DEVICE}=cpu` instead.",
                key=K_GPUS,
            )
        if len(set(gpus)) != len(gpus) or any(i < 0 for i in gpus):
            raise PlacementRefused(
                f"`{K_GPUS}={_ids(gpus)}` must list distinct non-negative GPU indices, "
                f"e.g. `{K_GPUS}={_ids(sorted({abs(i) for i in gpus}))}` instead.",
                key=K_GPUS,
            )
        if req.from_profile:
            # A profile describes the GPUs the job will get; the indices live on another machine.
            if len(gpus) != len(req.machine_gpus):
                n = len(req.machine_gpus)
                example = _ids(gpus[:n] if len(gpus) > n else range(n))
                alt = f"list {n} indices, e.g. `{K_GPUS}={example}`" if n else f"drop `{K_GPUS}`"
                raise PlacementRefused(
                    f"`{K_GPUS}={_ids(gpus)}` selects {len(gpus)} GPU(s) but the hardware "
                    f"profile describes {n}. Pick a profile with {len(gpus)} GPU(s), or "
                    f"{alt} instead.",
                    key=K_GPUS,
                )
            selected = [
                GpuInfo(index=i, name=g.name, memory_gib=g.memory_gib)
                for i, g in zip(gpus, req.machine_gpus, strict=True)
            ]
        else:
            missing = [i for i in gpus if i not in by_index]
            if missing:
                have = _ids(sorted(by_index)) if by_index else "none"
                alt = (
                    f"`{K_GPUS}={_ids(sorted(by_index)[: len(gpus)])}`"
                    if by_index
                    else f"`{K_DEVICE}=cpu`"
                )
                raise PlacementRefused(
                    f"`{K_GPUS}={_ids(gpus)}` names GPU(s) {_ids(missing)} that this machine does "
                    f"not have; it has: {have} (see `nvidia-smi -L`). Use {alt} instead.",
                    key=K_GPUS,
                )
            selected = [by_index[i] for i in gpus]
        if cvd is not None:
            # Shared clusters (SLURM, schedulers) set CUDA_VISIBLE_DEVICES to the job's GPUs:
            # `gpus` may narrow that set, never escape it.
            outside = [i for i in gpus if str(i) not in cvd]
            if outside:
                allowed = [int(e) for e in cvd if e.isdigit()]
                alt = f"`{K_GPUS}={_ids(allowed[: len(gpus)])}`" if allowed else f"drop `{K_GPUS}`"
                raise PlacementRefused(
                    f"`{K_GPUS}={_ids(gpus)}` asks for GPU(s) {_ids(outside)}, but "
                    f"CUDA_VISIBLE_DEVICES={req.cuda_visible_devices} (set by the environment, "
                    f"e.g. the scheduler) allows only {', '.join(cvd) or 'none'}. "
                    f"Use {alt} instead.",
                    key=K_GPUS,
                )
        notes.append(
            f"CUDA_VISIBLE_DEVICES={_ids(gpus)} is set before CUDA starts: physical GPU(s) "
            f"{_ids(gpus)} become cuda:0..{len(gpus) - 1} inside the process."
        )
        return selected, _ids(gpus), notes

    if req.from_profile or cvd is None:
        return list(req.machine_gpus), None, notes

    # Environment already restricts the GPUs; leave it alone and plan over what it shows.
    selected = []
    for pos, entry in enumerate(cvd):
        if entry.isdigit():
            if int(entry) in by_index:
                selected.append(by_index[int(entry)])
        elif req.machine_gpus:
            # UUID / MIG entries cannot be mapped to indices; assume the smallest GPU (safe side).
            smallest = min(req.machine_gpus, key=lambda g: g.memory_gib)
            selected.append(GpuInfo(index=pos, name=entry, memory_gib=smallest.memory_gib))
            if pos == 0:
                notes.append(
                    "CUDA_VISIBLE_DEVICES names GPUs by UUID/MIG id; indices shown are positions."
                )
    return selected, None, notes


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


def _refuse_mode_on(device: str, parallel: str, alt: str) -> PlacementRefused:
    return PlacementRefused(
        f"`{K_PARALLEL}={parallel}` cannot run on `{K_DEVICE}={device}`. Use {alt} instead.",
        key=K_PARALLEL,
    )


def _no_fit_message(req: PlacementRequest, gpus: list[GpuInfo], what: str) -> str:
    one = max((g.memory_gib for g in gpus), default=0.0)
    total = sum(g.memory_gib for g in gpus)
    alts = []
    if req.quantization == "none":
        alts.append(f"`{K_QUANT}=4bit`")
    if len(req.machine_gpus) > len(gpus) and not req.from_profile:
        alts.append(f"more GPUs (`{K_GPUS}=...` or drop `{K_GPUS}`)")
    alts.append(f"`{K_PARALLEL}=fsdp` / `{K_PARALLEL}=deepspeed` with CPU offload")
    return (
        f"The stage needs about {_gib(req.model_gib)} but {what}: one GPU has "
        f"{_gib(one)}, all {len(gpus)} together {_gib(total)}. Instead try "
        + ", or ".join(alts)
        + "."
        + _advice(req)
    )


def plan_placement(req: PlacementRequest) -> PlacementPlan:
    """Resolve a request into a plan, or raise PlacementRefused with the nearest alternative."""
    _validate(req)
    warnings: list[str] = []
    visible, cvd_out, notes = _select_gpus(req)
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
    parallel = req.parallel
    if parallel == "auto":
        if external and req.world_size > 1:
            parallel = "ddp"
        elif device != "cuda" or _fits(req.model_gib, visible):
            parallel = "single"
        elif external:
            raise PlacementRefused(
                _no_fit_message(req, visible, "it does not fit one GPU")
                + f" (A sharded device_map cannot run under {req.launched_by}; run with plain "
                f"`python` for `{K_PARALLEL}=model_parallel`.)",
                key=K_PARALLEL,
            )
        elif len(visible) >= 2 and _fits_across(req.model_gib, visible):
            parallel = "model_parallel"
        else:
            raise PlacementRefused(_no_fit_message(req, visible, "it fits nowhere"), key="model")
        notes.append(f"{K_PARALLEL}=auto resolved to {parallel}.")

    ctx = _Ctx(
        req=req,
        device=device,
        visible=visible,
        external=external,
        quant=quant,
        warnings=warnings,
        notes=notes,
        common={
            "device": device,
            "cuda_visible_devices": cvd_out,
            "quantization": quant,
            "quantization_fallback": fallback,
            "use_cpu": device == "cpu",
            # The whole point: at most one GPU per process, so the Trainer never wraps
            # nn.DataParallel, whatever the library version does on its own.
            "n_gpu": 1 if device == "cuda" else 0,
            "visible_gpus": tuple(g.index for g in visible),
        },
    )
    if parallel == "single":
        return _plan_single(ctx)
    if parallel == "model_parallel":
        return _plan_model_parallel(ctx)
    return _plan_distributed(ctx, parallel)


@dataclass
class _Ctx:
    """What every mode planner needs; `common` holds the PlacementPlan fields they share."""

    req: PlacementRequest
    device: str
    visible: list[GpuInfo]
    external: bool
    quant: str
    warnings: list[str]
    notes: list[str]
    common: dict[str, Any]

    def plan(self, **fields: Any) -> PlacementPlan:
        return PlacementPlan(
            warnings=tuple(self.warnings), notes=tuple(self.notes), **self.common, **fields
        )


def _idle_warning(visible: list[GpuInfo], used: int) -> str:
    idle = [g.index for g in visible[used:]]
    return (
        f"GPU(s) {_ids(idle)} stay idle: this run uses {used} GPU(s) of {len(visible)} visible. "
        f"To train on all of them set `{K_PARALLEL}=ddp` (one process per GPU), or hide them "
        f"with `{K_GPUS}={_ids([g.index for g in visible[:used]])}`."
    )


def _process_count(req: PlacementRequest, external: bool) -> int:
    if external and req.nproc is not None and req.nproc != req.world_size:
        raise PlacementRefused(
            f"`{K_NPROC}={req.nproc}` but the launcher ({req.launched_by}) started "
            f"{req.world_size} process(es). Drop `{K_NPROC}` or relaunch with "
            f"`--nproc_per_node={req.nproc}` instead.",
            key=K_NPROC,
        )
    return req.world_size if external else (req.nproc or 1)


def _plan_single(c: _Ctx) -> PlacementPlan:
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
        if not _fits(req.model_gib, visible[:1]):
            alts = []
            if len(visible) >= 2 and not c.external:
                alts.append(f"`{K_PARALLEL}=model_parallel` (shards over the {len(visible)} GPUs)")
            if c.quant == "none":
                alts.append(f"`{K_QUANT}=4bit`")
            alts.append(f"`{K_PARALLEL}=fsdp` with CPU offload")
            raise PlacementRefused(
                f"`{K_PARALLEL}=single`: the stage needs about {_gib(req.model_gib)} but GPU "
                f"{visible[0].index} has {_gib(visible[0].memory_gib)}. Use "
                f"{', or '.join(alts)} instead.{_advice(req)}",
                key=K_PARALLEL,
            )
        if len(visible) >= 2 and not c.external:
            c.warnings.append(_idle_warning(visible, 1))
    else:
        device_map = {"": c.device}
    return c.plan(
        mode="single",
        device_map=device_map,
        max_memory=None,
        world_size=1,
        nproc=1,
        launcher="external" if c.external else "none",
    )


def _plan_model_parallel(c: _Ctx) -> PlacementPlan:
    req, visible = c.req, c.visible
    if c.device != "cuda":
        raise _refuse_mode_on(c.device, "model_parallel", f"`{K_PARALLEL}=single`")
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
    if not _fits_across(req.model_gib, visible):
        raise PlacementRefused(
            _no_fit_message(req, visible, "it does not fit even across the GPUs"), key="model"
        )
    if _fits(req.model_gib, visible):
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
        max_memory=_max_memory(visible),
        world_size=1,
        nproc=1,
        launcher="none",
    )


def _plan_distributed(c: _Ctx, mode: str) -> PlacementPlan:
    """ddp / fsdp / deepspeed: one process per GPU (or gloo processes on CPU for ddp)."""
    req, visible, device = c.req, c.visible, c.device
    if device == "mps":
        raise _refuse_mode_on(device, mode, f"`{K_PARALLEL}=single`")
    if device == "cpu" and mode != "ddp":
        raise _refuse_mode_on(
            device, mode, f"`{K_DEVICE}=cuda`, or `{K_PARALLEL}=ddp {K_NPROC}=2` on CPU"
        )
    nproc = _process_count(req, c.external)

    if device == "cuda":
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
            c.warnings.append(_idle_warning(visible, nproc))
    elif not c.external and (req.nproc is None or req.nproc < 2):
        raise PlacementRefused(
            f"`{K_PARALLEL}=ddp` on CPU needs the number of (gloo) processes: set "
            f"`{K_NPROC}=2` or more, or use `{K_PARALLEL}=single` instead.",
            key=K_NPROC,
        )

    used = visible if c.external else visible[:nproc]
    device_map: dict[str, int | str] | None
    if mode == "ddp":
        if device == "cuda" and not _fits(req.model_gib, used):
            raise PlacementRefused(
                f"`{K_PARALLEL}=ddp` keeps a full replica on every GPU. "
                + _no_fit_message(req, used, "it does not fit one GPU"),
                key=K_PARALLEL,
            )
        # Each rank loads its whole replica onto its own device; never a sharded map.
        device_map = {"": req.local_rank} if device == "cuda" else {"": "cpu"}
        if c.quant != "none":
            c.notes.append(
                f"{c.quant} in DDP: each rank quantizes its own replica on its own device."
            )
    else:
        device_map = None  # FSDP / DeepSpeed place the parameters themselves.
        _check_sharded_quant(req, mode, c.quant, c.notes)
        if (mode == "fsdp" or req.deepspeed_stage == 3) and not _fits_across(req.model_gib, used):
            c.warnings.append(
                f"The model (~{_gib(req.model_gib)}) exceeds the {len(used)} GPU(s) together; "
                "it only trains with CPU offload enabled."
            )

    if c.external:
        launcher = "external"
    elif mode == "ddp" and nproc == 1:
        launcher = "none"
        c.notes.append("ddp with one process: no gradient sync, same as parallel=single.")
    else:
        # FSDP / DeepSpeed need a process group even for one process (Trainer: "fsdp only
        # works in distributed training"), so the engine relaunches itself under torchrun.
        launcher = "self-torchrun"
        c.notes.append(
            f"The engine relaunches itself with torch.distributed.run, {nproc} process(es); "
            "each replans with its own LOCAL_RANK."
        )
    if device == "cpu":
        c.notes.append("CPU DDP uses the gloo backend.")
    return c.plan(
        mode=mode,
        device_map=device_map,
        max_memory=None,
        world_size=req.world_size if c.external else nproc,
        nproc=nproc,
        launcher=launcher,
    )


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
    }[plan.launcher]
    lines.append(f"mode: {plan.mode}, {launch}")
    if plan.mode == "deepspeed":
        lines.append(DEEPSPEED_EXPERIMENTAL)
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
