"""The parts of a stage's `manifest.json` that are records of their own: what trained per
component, what is stored where, what the stage verified on load, how it was quantized and
placed, and what its weights can be trusted to repeat.

Each reads leniently (`from_json`: a manifest written by an older engine lacks fields, one by
a newer engine may carry more) and writes back exactly the JSON the engine always wrote, so
stores written before still read and the files written now keep their keys and values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from recipe_engine.files import JsonObject

Record = TypeVar("Record")


def known_fields(cls: type, data: JsonObject) -> JsonObject:
    """The fields `cls` has: records written by a newer engine may carry more."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def read_record(cls: type[Record], data: Any) -> Record | None:
    """`cls` from its JSON object; None where the manifest recorded none (`{}`, null)."""
    return cls(**known_fields(cls, data)) if isinstance(data, dict) and data else None


@dataclass(frozen=True)
class TrainableCount:
    """One component's row of a trainable report: logical parameters (4-bit weights
    unpacked), how many of them trained, and their share in percent."""

    params: int
    trainable: int
    percent: float

    @classmethod
    def of(cls, params: int, trainable: int) -> TrainableCount:
        percent = round(100.0 * trainable / params, 4) if params else 0.0
        return cls(params, trainable, percent)


# By component (the layout's groups), then "total".
TrainableReport = dict[str, TrainableCount]


@dataclass
class ComponentCensus:
    """One component's stored elements, by dtype ("torch.bfloat16") and by device ("cpu")."""

    dtype: dict[str, int] = field(default_factory=dict)
    device: dict[str, int] = field(default_factory=dict)


Census = dict[str, ComponentCensus]  # by component


def read_trainable_report(data: Any) -> TrainableReport:
    rows = data if isinstance(data, dict) else {}
    return {name: TrainableCount(**known_fields(TrainableCount, row)) for name, row in rows.items()}


def read_census(data: Any) -> Census:
    rows = data if isinstance(data, dict) else {}
    return {
        name: ComponentCensus(**known_fields(ComponentCensus, cell)) for name, cell in rows.items()
    }


@dataclass(frozen=True)
class MergeCheck:
    """What an adapter parent's merge check measured (run.merge_check); recorded beside the
    merged weights (`merge_check.json`) and in the child's manifest (`handoff.merge_check`)."""

    max_abs_logit_diff: float  # merged vs adapter model
    adapter_effect: float  # adapter vs its base: what a merge that drops the adapter would show
    tolerance: float  # absolute: RELATIVE_TOLERANCE[dtype] x the largest |adapter logit|
    tensors_checked: int  # base tensors found in the merged model
    changed_as_expected: int  # LoRA-targeted weights the merge changed (W + B A)
    probe: str

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)


# A weight's checksum in each float dtype a child may load it in ("torch.bfloat16" -> hash).
DtypeChecksums = dict[str, str]
# The checksums of every weight a stage trained, by runtime parameter name.
Checksums = dict[str, DtypeChecksums]


@dataclass(frozen=True)
class HandoffCounts:
    """A parent's trained weights, checked after the child loaded them: how many arrived with
    the parent's values, and how many the child quantized on load (checked for presence)."""

    checked: int
    quantized_on_load: int


@dataclass(frozen=True)
class Handoff:
    """What a stage verified when it loaded: its parent's training arrived (a stage with a
    parent), an adapter it starts from merged as the adapter computes (an adapter parent or
    init). Written as `{}` where there was nothing to verify."""

    counts: HandoffCounts | None = None
    merge_check: MergeCheck | None = None

    def to_json(self) -> JsonObject:
        counts = dataclasses.asdict(self.counts) if self.counts else {}
        merge = {"merge_check": self.merge_check.to_json()} if self.merge_check else {}
        return {**counts, **merge}

    @classmethod
    def from_json(cls, data: Any) -> Handoff:
        data = data if isinstance(data, dict) else {}
        counts = read_record(HandoffCounts, data) if "checked" in data else None
        return cls(counts, read_record(MergeCheck, data.get("merge_check")))


@dataclass(frozen=True)
class QuantizationFacts:
    """How a stage's base was quantized: the bits it trained on ("none" where it was not),
    the stage's `quantization` settings, and the fallback the plan took where bitsandbytes
    cannot run."""

    bits: str | None = None  # 4bit | 8bit | none
    # BitsAndBytesConfig keyword arguments as the stage set them (a library edge)
    settings: JsonObject | None = None
    fallback: str | None = None


@dataclass(frozen=True)
class RecordedPlacement:
    """Where a stage's weights were placed (plan's `PlacementPlan`, as the plan decided it)."""

    device: str = "cpu"
    mode: str = "single"
    device_map: dict[str, int | str] | str | None = None
    max_memory: dict[str, str] | None = None  # by GPU index, as JSON keys it
    n_gpu: int = 0
    world_size: int = 1
    nproc: int = 1
    starter: str = "python"  # manifests written before it named it `launcher` (not read back)
    cuda_visible_devices: str | None = None
    visible_gpus: tuple[int, ...] = ()
    quantization: str = "none"
    quantization_fallback: str | None = None
    use_cpu: bool = False
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordedDeterminism:
    """What a stage's weights can be trusted to repeat (plan's `Determinism`, as `plan`
    printed it): repeatable or not, the kernels asked for, what no switch covers."""

    repeatable: bool = False
    deterministic_kernels: bool = False
    scope: str = ""
    not_covered: tuple[str, ...] = ()
    cost: str = ""
