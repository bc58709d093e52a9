"""Which GPUs a stage's process sees: `gpus=`, a hardware profile, or CUDA_VISIBLE_DEVICES as
the environment (a scheduler) set it; refused with the nearest alternative."""

from __future__ import annotations

from recipe_engine.plan.placement_request import (
    K_DEVICE,
    K_GPUS,
    PlacementRefused,
    PlacementRequest,
    ids,
    parse_cvd,
)
from recipe_engine.resolve.machine import GpuInfo


def select_gpus(req: PlacementRequest) -> tuple[list[GpuInfo], str | None, list[str]]:
    """The GPUs this process will see (physical indices), the CVD value to set, and notes."""
    by_index = {g.index: g for g in req.machine_gpus}
    cvd = None if req.cuda_visible_devices is None else parse_cvd(req.cuda_visible_devices)
    if req.gpus is not None:
        gpus = tuple(req.gpus)
        _check_selection(req, gpus)
        selected = _from_profile(req, gpus) if req.from_profile else _on_machine(gpus, by_index)
        if cvd is not None:
            _check_inside(req, gpus, cvd)
        note = (
            f"CUDA_VISIBLE_DEVICES={ids(gpus)} is set before CUDA starts: physical GPU(s) "
            f"{ids(gpus)} become cuda:0..{len(gpus) - 1} inside the process."
        )
        return selected, ids(gpus), [note]
    if req.from_profile or cvd is None:
        return list(req.machine_gpus), None, []
    return _shown_by(req, cvd, by_index)


def _check_selection(req: PlacementRequest, gpus: tuple[int, ...]) -> None:
    if req.device in ("cpu", "mps"):
        raise PlacementRefused(
            f"`{K_GPUS}={ids(gpus)}` selects GPUs, but `{K_DEVICE}={req.device}` trains on "
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
            f"`{K_GPUS}={ids(gpus)}` must list distinct non-negative GPU indices, "
            f"e.g. `{K_GPUS}={ids(sorted({abs(i) for i in gpus}))}` instead.",
            key=K_GPUS,
        )


def _from_profile(req: PlacementRequest, gpus: tuple[int, ...]) -> list[GpuInfo]:
    """A profile describes the GPUs the job will get; the indices live on another machine."""
    if len(gpus) != len(req.machine_gpus):
        n = len(req.machine_gpus)
        example = ids(gpus[:n] if len(gpus) > n else range(n))
        alt = f"list {n} indices, e.g. `{K_GPUS}={example}`" if n else f"drop `{K_GPUS}`"
        raise PlacementRefused(
            f"`{K_GPUS}={ids(gpus)}` selects {len(gpus)} GPU(s) but the hardware "
            f"profile describes {n}. Pick a profile with {len(gpus)} GPU(s), or "
            f"{alt} instead.",
            key=K_GPUS,
        )
    return [
        GpuInfo(index=i, name=g.name, memory_gib=g.memory_gib)
        for i, g in zip(gpus, req.machine_gpus, strict=True)
    ]


def _on_machine(gpus: tuple[int, ...], by_index: dict[int, GpuInfo]) -> list[GpuInfo]:
    missing = [i for i in gpus if i not in by_index]
    if missing:
        have = ids(sorted(by_index)) if by_index else "none"
        alt = (
            f"`{K_GPUS}={ids(sorted(by_index)[: len(gpus)])}`" if by_index else f"`{K_DEVICE}=cpu`"
        )
        raise PlacementRefused(
            f"`{K_GPUS}={ids(gpus)}` names GPU(s) {ids(missing)} that this machine does "
            f"not have; it has: {have} (see `nvidia-smi -L`). Use {alt} instead.",
            key=K_GPUS,
        )
    return [by_index[i] for i in gpus]


def _check_inside(req: PlacementRequest, gpus: tuple[int, ...], cvd: list[str]) -> None:
    """Shared clusters (their schedulers) set CUDA_VISIBLE_DEVICES to the job's GPUs: `gpus`
    may narrow that set, never escape it."""
    outside = [i for i in gpus if str(i) not in cvd]
    if outside:
        allowed = [int(e) for e in cvd if e.isdigit()]
        alt = f"`{K_GPUS}={ids(allowed[: len(gpus)])}`" if allowed else f"drop `{K_GPUS}`"
        raise PlacementRefused(
            f"`{K_GPUS}={ids(gpus)}` asks for GPU(s) {ids(outside)}, but "
            f"CUDA_VISIBLE_DEVICES={req.cuda_visible_devices} (set by the environment, "
            f"e.g. the scheduler) allows only {', '.join(cvd) or 'none'}. "
            f"Use {alt} instead.",
            key=K_GPUS,
        )


def _shown_by(
    req: PlacementRequest, cvd: list[str], by_index: dict[int, GpuInfo]
) -> tuple[list[GpuInfo], str | None, list[str]]:
    """The environment already restricts the GPUs: left alone, planned over what it shows."""
    selected, notes = [], []
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
