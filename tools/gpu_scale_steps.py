"""The GPU report's `scale` group: models of the user's size built on the card, r3 through
them to commit, the engine against plain TRL at 2 B, packing against unpacked at 0.5 B
(`tools.gpu_report --only scale`)."""

from __future__ import annotations

import sys
from pathlib import Path

from tools.gpu_steps import Step, last_line

SCALE = "tools.scale_models"
SCALE_SECTION = "The user's scale: Qwen2-VL-2B and -7B, Qwen2.5-0.5B packed"
# The user's scale on the card: r3 at Qwen2-VL-2B's and -7B's published shapes (random weights
# drawn on the GPU, 448 px pictures), rows a step and optimizer steps a stage; padding-free
# packing against unpacked on Qwen2.5-0.5B under flex_attention (no dense mask over the packed
# sequence), batch and steps; all sized to fit `GPU_ONLY=scale` in one lease (about 12 min).
SCALE_R3 = {"qwen2-vl-2b": 20, "qwen2-vl-7b": 10}
SCALE_BATCH = 8
# Packed and unpacked take about the same tokens a step: text-lora's rows are 30-31 tokens in
# Qwen2's template, so 64 rows unpacked are 1,984 tokens and 16 sequences of 128 packed 2,048
# (at TRL's default 1,024 a sequence, the 800 rows' 24,186 tokens fill 24 sequences: a batch of
# 64 would be the whole data set a step, which the estimate counts as 64 full sequences).
PACKING_BATCH, PACKED_BATCH, PACKING_STEPS = 64, 16, 20
FLEX = "flex_attention"
PACKED = ("--set", "++stage.llm.train.packing=true", "--set", "++stage.llm.train.max_length=128")
# A dry run plans the GPU runs on a CPU machine for a card of the H100's size.
DRY_HARDWARE = ("--dry-run", "--hardware", "1x-h100-80gb")


def scale_steps(folder: Path) -> list[Step]:
    """Build the scale models on the card, r3 at each size to commit (phases, planned against
    measured CUDA memory, tokens/s and MFU: `tools.bench_scale`), the engine against plain
    TRL at 2 B (`tools.bench_trl --scale`), packing against unpacked at 0.5 B."""
    builds = [_scale_build(name) for name in SCALE_R3] + [_scale_build("qwen2.5-0.5b", FLEX)]
    runs = [
        _scale_bench(
            folder,
            f"r3 {name}",
            f"r3-two-stage@{name}",
            steps,
            SCALE_BATCH,
            "--out",
            str(folder / f"scale-{name}.json"),
        )  # fmt: skip
        for name, steps in SCALE_R3.items()
    ]
    packing = [
        _scale_bench(
            folder,
            f"text-lora qwen2.5-0.5b {FLEX} {variant}",
            "text-lora@qwen2.5-0.5b",
            PACKING_STEPS,
            batch,
            "--attention",
            FLEX,
            *extra,
        )  # fmt: skip
        for variant, batch, extra in (
            ("unpacked", PACKING_BATCH, ()),
            ("packed", PACKED_BATCH, PACKED),
        )  # fmt: skip
    ]
    trl = (sys.executable, "-m", "tools.bench_trl", "--device", "cuda", "--parts",
           "engine", "--scale", "qwen2-vl-2b")  # fmt: skip
    against = Step(SCALE_SECTION, "engine against plain TRL, qwen2-vl-2b", trl, 420,
                   result=last_line, group="scale", dry_args=DRY_HARDWARE)  # fmt: skip
    return [*builds, *runs, against, *packing]


def _scale_build(name: str, attention: str | None = None) -> Step:
    """A scale model drawn on the card (`tools.scale_models`), before the steps using it."""
    chosen = ("--attention", attention) if attention else ()
    command = (sys.executable, "-m", SCALE, "build", name, "--device", "cuda", *chosen)
    label = f"build {name}{f' {attention}' if attention else ''}"
    return Step(SCALE_SECTION, label, command, 300, group="setup", serves=("scale",))


def _scale_bench(folder: Path, name: str, run: str, steps: int, batch: int, *args: str) -> Step:
    """One `tools.bench_scale` run on the card; in the dry mode its own dry run, planned for an
    H100 on this machine."""
    command = (sys.executable, "-m", "tools.bench_scale", "--device", "cuda",
               "--work", str(folder / "scale"), "--runs", run, "--steps", str(steps),
               "--batch", str(batch), *args)  # fmt: skip
    return Step(SCALE_SECTION, name, command, 480, result=last_line, group="scale",
                dry_args=DRY_HARDWARE)  # fmt: skip
