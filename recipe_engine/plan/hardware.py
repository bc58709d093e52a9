"""Hardware settings as the planner reads them: a profile's GPUs and the `gpus=` selection.

Pure: the machine itself is detected by `resolve.machine`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.machine import GpuInfo


def _positive_number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise RecipeError(f"`{key}` must be a positive number of GiB, got {value!r}.", key=key)
    return float(value)


def profile_gpus(profile: Mapping) -> tuple[GpuInfo, ...]:
    """The GPUs a hardware profile describes, indexed 0..n-1 (the job's GPUs, in order).

    Canonical shape: ``{"name": "2x-rtx6000-ada", "gpus": [{"name": "RTX 6000 Ada",
    "memory_gib": 48}, ...]}``; an entry may carry ``count: N`` for N identical GPUs.
    Also accepted: ``{"gpu_count": 2, "gpu_name": "RTX 6000 Ada", "gpu_memory_gib": 48}``.
    No GPU keys (or ``gpus: []``) = a CPU-only profile.
    """
    where = f"hardware profile `{profile.get('name', '?')}`"
    if "gpus" in profile and "gpu_count" in profile:
        raise RecipeError(f"{where}: give either `gpus` (a list) or `gpu_count`, not both.")
    if "gpu_count" in profile:
        count = profile["gpu_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RecipeError(f"{where}: `gpu_count` must be a whole number >= 0, got {count!r}.")
        if count == 0:
            return ()
        memory = _positive_number(profile.get("gpu_memory_gib"), "gpu_memory_gib")
        name = str(profile.get("gpu_name", "GPU"))
        return tuple(GpuInfo(index=i, name=name, memory_gib=memory) for i in range(count))

    entries = profile.get("gpus") or []
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise RecipeError(f"{where}: `gpus` must be a list of {{name, memory_gib}} entries.")
    gpus: list[GpuInfo] = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise RecipeError(f"{where}: `gpus[{n}]` must be a mapping with name and memory_gib.")
        memory = _positive_number(entry.get("memory_gib"), f"gpus[{n}].memory_gib")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise RecipeError(f"{where}: `gpus[{n}].count` must be a whole number >= 1.")
        name = str(entry.get("name", "GPU"))
        gpus += [GpuInfo(index=0, name=name, memory_gib=memory) for _ in range(count)]
    return tuple(GpuInfo(index=i, name=g.name, memory_gib=g.memory_gib) for i, g in enumerate(gpus))


def parse_gpus(value: object) -> tuple[int, ...] | None:
    """`gpus=` from Hydra: None / '' -> None; 6 -> (6,); [6, 7] or "6,7" -> (6, 7).

    Order is kept (it becomes the CUDA_VISIBLE_DEVICES order); duplicates are an error.
    """
    if value is None:
        return None
    items: list[object]
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none", "null"):
            return None
        items = [part.strip() for part in text.strip("[]()").split(",")]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        items = list(value)  # list, tuple, omegaconf ListConfig
    else:
        raise _bad_gpus(value)
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise _bad_gpus(value)
        if isinstance(item, int):
            number = item
        elif isinstance(item, str) and item.isdigit():
            number = int(item)
        else:
            raise _bad_gpus(value)
        if number < 0:
            raise _bad_gpus(value)
        out.append(number)
    if not out:
        raise RecipeError(
            "`gpus` is an empty list: it selects no GPU. Drop `gpus` or set `device=cpu`.",
            key="gpus",
        )
    if len(set(out)) != len(out):
        raise RecipeError(f"`gpus={value}` lists a GPU twice; each index once.", key="gpus")
    return tuple(out)


def _bad_gpus(value: object) -> RecipeError:
    return RecipeError(
        f"`gpus={value!r}` is not a GPU selection. Use an index (`gpus=6`), a list "
        "(`gpus=[6,7]`) or a comma string (`gpus='6,7'`); indices as `nvidia-smi -L` numbers them.",
        key="gpus",
    )
