"""What `gpu_check` sees inside a stage: the engine's CLI run in a child with the stage's
guard-and-preflight step observed, one `ProbeRecord` per stage written as a JSON line.

The record says whether CUDA autocast was on in the model's forward (the preflight's forward
fires a hook), the tile TRL's fused LM head projected onto in that forward (its rows and the
dtype it computed in: the memory estimate's `logits` part), and what the placement guard
promises, read off the real trainer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.files import JsonObject

PROBE_FILE = "probe.jsonl"
# The child's command: `python -c PROBE OUT PLANT ARGS...` (see `probe_run`).
PROBE = (
    "import sys; from tools.gpu_probe import probe_run; "
    "raise SystemExit(probe_run(sys.argv[1], sys.argv[2], sys.argv[3:]))"
)
PLANT_BF16_LAYER = "plant-bf16-layer"


@dataclass(frozen=True)
class ForwardFacts:
    """The model's first forward: CUDA autocast on or off, its dtype, what the model returned
    (TRL's fused loss returns no logits)."""

    autocast: bool
    autocast_dtype: str  # "bfloat16"
    output: str  # the output's class name


@dataclass(frozen=True)
class HeadFacts:
    """TRL's fused LM head in the model's first forward: the positions it scored (on CUDA only
    the labelled ones, elsewhere all) and the dtype of its projection tile (the autocast dtype
    where autocast is on, else the hidden states')."""

    head_rows: int
    head_dtype: str


@dataclass(frozen=True)
class TrainerFacts:
    """What the placement guard promises, as the built trainer holds it."""

    n_gpu: int
    bf16: bool
    mixed_precision: str  # accelerate's: "bf16", "no", ...
    world_size: int
    device_map: dict[str, int | str] | str | None  # the plan's placement
    mode: str  # the plan's placement mode: single | fsdp | ...
    data_parallel: bool  # the model, or the trainer's wrap of it, is an nn.DataParallel
    param_devices: list[str]
    params_4bit: int  # bitsandbytes Params4bit tensors
    params_4bit_devices: list[str]


@dataclass(frozen=True)
class ProbeRecord:
    """One stage as the probe saw it; `forward` is None where no forward ran."""

    stage: str
    trainer: TrainerFacts
    forward: ForwardFacts | None = None
    head: HeadFacts | None = None  # None where no fused head ran (ORPO's plain forward)

    def to_json(self) -> JsonObject:
        """One flat object: the stage, the forward's facts, the head's, the trainer's."""
        forward = dataclasses.asdict(self.forward) if self.forward else {}
        head = dataclasses.asdict(self.head) if self.head else {}
        return {"stage": self.stage, **forward, **head, **dataclasses.asdict(self.trainer)}

    @classmethod
    def from_json(cls, data: JsonObject) -> ProbeRecord:
        trainer = TrainerFacts(**{f.name: data[f.name] for f in dataclasses.fields(TrainerFacts)})
        names = [f.name for f in dataclasses.fields(ForwardFacts)]
        forward = ForwardFacts(**{n: data[n] for n in names}) if "autocast" in data else None
        head = HeadFacts(data["head_rows"], data["head_dtype"]) if "head_rows" in data else None
        return cls(data["stage"], trainer, forward, head)


def read_probes(path: Path) -> list[ProbeRecord]:
    """What `probe_run` wrote: a record per stage, in the order the stages ran."""
    lines = path.read_text().splitlines()
    return [ProbeRecord.from_json(json.loads(line)) for line in lines if line.strip()]


def probe_run(out: str, plant: str, args: list[str]) -> int:
    """The engine's CLI with the stage's guard-and-preflight step observed (run in a child);
    `plant` = PLANT_BF16_LAYER plants the dtype mismatch the preflight must catch."""
    from recipe_engine.cli.main import main

    arm_probe(out, plant)
    return main(args)


def arm_probe(out: str, plant: str) -> None:
    """Observe every stage's guard-and-preflight step in this process, a record per stage
    appended to `out` (`plant`: as `probe_run`)."""
    import torch

    from recipe_engine.run.stage import StageRecipe

    guard = StageRecipe.guard_and_preflight
    build = StageRecipe.build_trainer

    def observed_guard(self: StageRecipe) -> None:
        seen: list[ForwardFacts] = []
        heads: list[HeadFacts] = []
        hook = self.trainer.model.register_forward_hook(autocast_hook(seen))
        try:
            with fused_head_watched(heads):
                guard(self)  # the preflight's forward fires the hook and the head
        finally:
            hook.remove()
            facts = trainer_facts(self.trainer, self.stage.placement)
            forward, head = seen[0] if seen else None, heads[0] if heads else None
            record = ProbeRecord(self.stage.name, facts, forward, head)
            with open(out, "a") as handle:
                handle.write(json.dumps(record.to_json()) + "\n")

    def planted_build(self: StageRecipe) -> None:
        build(self)
        # One layer left in bf16 inside a float32 stage (as a checkpoint saved half in bf16
        # would load): no autocast reconciles it. The first plain nn.Linear the forward meets.
        linear = next(m for m in self.trainer.model.modules() if type(m) is torch.nn.Linear)
        linear.to(dtype=torch.bfloat16)

    StageRecipe.guard_and_preflight = observed_guard
    if plant == PLANT_BF16_LAYER:
        StageRecipe.build_trainer = planted_build


def autocast_hook(seen: list[ForwardFacts]) -> Callable[..., None]:
    """A forward hook recording, once, whether CUDA autocast was on in the model's forward."""
    import torch

    def hook(module: Any, inputs: Any, output: Any) -> None:
        if seen:
            return
        dtype = str(torch.get_autocast_dtype("cuda")).removeprefix("torch.")
        seen.append(ForwardFacts(torch.is_autocast_enabled("cuda"), dtype, type(output).__name__))

    return hook


@contextmanager
def fused_head_watched(heads: list[HeadFacts]) -> Iterator[None]:
    """Within the block, TRL's fused LM head records its first call in `heads`."""
    import torch
    from trl.trainer import utils

    projection = utils._ChunkedLogProbFunction

    class Recorded:
        @staticmethod
        def apply(hidden: torch.Tensor, *args: Any) -> Any:
            kind = hidden.device.type
            autocast = torch.is_autocast_enabled(kind)
            dtype = torch.get_autocast_dtype(kind) if autocast else hidden.dtype
            if not heads:
                heads.append(HeadFacts(hidden.shape[0], str(dtype).removeprefix("torch.")))
            return projection.apply(hidden, *args)

    utils._ChunkedLogProbFunction = Recorded
    try:
        yield
    finally:
        utils._ChunkedLogProbFunction = projection


def trainer_facts(trainer: Any, placement: Any) -> TrainerFacts:
    """What the placement guard promises, read off the real trainer."""
    import torch

    wrapped = trainer._wrap_model(trainer.model, training=True)
    quantized = [p for p in trainer.model.parameters() if type(p).__name__ == "Params4bit"]
    return TrainerFacts(
        n_gpu=trainer.args.n_gpu,
        bf16=bool(trainer.args.bf16),
        mixed_precision=str(trainer.accelerator.mixed_precision),
        world_size=trainer.args.world_size,
        device_map=placement.device_map,
        mode=placement.mode,
        data_parallel=isinstance(trainer.model, torch.nn.DataParallel)
        or isinstance(wrapped, torch.nn.DataParallel),
        param_devices=sorted({str(p.device) for p in trainer.model.parameters()}),
        params_4bit=len(quantized),
        params_4bit_devices=sorted({str(p.device) for p in quantized}),
    )
