"""The closed choices of the structured config, as types: Hydra refuses any other value at
composition, and the refusal lists the members (`compose.translate_error`).

Each is a `StrEnum` whose members' names are their values, so a member is the string a user
writes (it compares, hashes, formats and serializes as that string: stage keys are the same
as with plain strings). Choices that grow by a module (trainer kinds, data formats,
launchers) stay strings, checked against their registries.
"""

from __future__ import annotations

from enum import StrEnum


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class Parallel(StrEnum):
    auto = "auto"
    single = "single"
    model_parallel = "model_parallel"
    ddp = "ddp"
    fsdp = "fsdp"
    deepspeed = "deepspeed"


class Dtype(StrEnum):
    """A stage's compute dtype."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


# A dtype as a recipe asks for it: one of `Dtype`, or auto (a stage's: its model entry's; a
# model entry's: bfloat16, or float32 on a CPU that emulates bfloat16 where float32 fits).
DtypeChoice = StrEnum("DtypeChoice", {"auto": "auto", **{d.name: d.value for d in Dtype}})


class ModelSource(StrEnum):
    hub = "hub"
    tiny = "tiny"
    local = "local"


class ModelKind(StrEnum):
    vlm = "vlm"
    causal_lm = "causal_lm"


class DataSource(StrEnum):
    local = "local"
    hub = "hub"
    tiny = "tiny"


def values(choice: type[StrEnum]) -> tuple[str, ...]:
    """The members as the strings a user writes, in their declared order."""
    return tuple(member.value for member in choice)
