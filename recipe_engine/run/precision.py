"""A stage's planned precision (`plan.precision`) made true of its model, checked, and kept
in every forward the engine runs.

`hold` casts each parameter to the dtype the plan gives its kind (a quantized weight keeps its
k-bit storage); it runs after the policies and again once the TRL trainer is built, which
casts a k-bit model's trainable weights to bfloat16 in its constructor. `check` is the guard's
side: before step 0, every parameter is in its planned dtype. `forwards` is the context the
engine's own forwards run in (the preflight, evaluation, generation): the Trainer's autocast
where it autocasts, so no forward meets a dtype training did not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch

from recipe_engine.plan.precision import MAGNITUDE_DTYPE, PrecisionPlan
from recipe_engine.run.loading import is_quantized_param, torch_dtype


class PrecisionViolation(RuntimeError):
    """A parameter is not in the dtype the plan gave it; raised before step 0."""


def planned_dtype(name: str, precision: PrecisionPlan) -> str:
    """The dtype the plan gives the parameter `name` (a name as `named_parameters` gives it)."""
    if ".lora_magnitude_vector" in name:
        return MAGNITUDE_DTYPE
    if ".lora_" in name and precision.adapters is not None:
        return precision.adapters
    return precision.weights


def held_parameters(model: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """The floating-point parameters whose dtype the plan decides (not k-bit storage)."""
    for name, param in model.named_parameters():
        if param.is_floating_point() and not is_quantized_param(param):
            yield name, param


def hold(model: Any, precision: PrecisionPlan) -> int:
    """Cast every parameter to its planned dtype; return how many moved. The Parameter
    objects stay (only their data changes), so what holds them (tied weights, PEFT's
    wrappers) still does; no optimizer exists yet to hold stale state."""
    moved = 0
    for name, param in held_parameters(model):
        dtype = torch_dtype(planned_dtype(name, precision))
        if param.dtype != dtype:
            param.data = param.data.to(dtype)
            moved += 1
    return moved


def check(model: Any, precision: PrecisionPlan, stage: str) -> None:
    """Every parameter in its planned dtype, or the stage stops before step 0."""
    wrong = {}
    for name, param in held_parameters(model):
        planned = planned_dtype(name, precision)
        if param.dtype != torch_dtype(planned):
            wrong.setdefault((str(param.dtype).removeprefix("torch."), planned), name)
    if wrong:
        found = "; ".join(f"{name} is {held}, planned {planned}" for (held, planned), name in
                          wrong.items())  # fmt: skip
        raise PrecisionViolation(
            f"Stage `{stage}`: parameters are not in the dtypes its plan gives them ({found}). "
            "Something cast them after the plan's precision was applied; the stage stops "
            "before step 0."
        )


def forwards(precision: PrecisionPlan, device: str) -> Any:
    """The context every forward the engine runs itself goes in: the Trainer's autocast
    where the plan has it autocast, else none (the parameters are consistent already)."""
    if not precision.autocast:
        return nullcontext()
    return torch.autocast(device_type=device, dtype=torch_dtype(precision.activations))
