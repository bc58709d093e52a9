"""The engine against plain TRL with and without packing, on the CPU (`make bench`; alone:
`python -m tools.bench_packing --pairs 3`).

For `text-lora` and `r3-two-stage`, each without and with `packing=true`: `pairs` times, the
engine's run (`python -m recipe_engine`, evaluation off) then a plain TRL script given the same
model folders, rows and the settings the engine's plan resolved (LoraConfig, BitsAndBytesConfig,
SFTConfig, the fully trained components' parameters), each in a fresh process. The table gives
the medians of the process wall time and of training tokens per second (the Trainer's
`num_tokens` over `train_runtime`, summed over a recipe's stages).

Packing is measured with `max_length=128` and a batch of 4 (about the 16 arithmetic rows of
the unpacked batch, so an optimizer step sees about the same rows); a recipe whose plan refuses
packing (r3's image rows) says so in its row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.plan.recipe_plan import StagePlan
from recipe_engine.resolve.tiny import build_dataset, build_tiny_model
from recipe_engine.run.planning import plan_from_config
from recipe_engine.tables import text_table
from tools.bench_trl import stage_log, timed

QUIET = ("eval.enabled=false", "eval.compare=false", "device=cpu")
# Optimizer steps per stage: enough for a steady tokens/s, short enough for 3 pairs.
STEPS = 30
PACKED = ("packing=true", "max_length=128", "per_device_train_batch_size=4")
RECIPES = {"text-lora": ("llm",), "r3-two-stage": ("vision", "llm")}


@dataclass(frozen=True)
class Measured:
    """One process: its wall time and its stages' training tokens per second."""

    wall_s: float
    tokens_per_s: float


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_packing")
    parser.add_argument("--pairs", type=int, default=3, help="engine / plain TRL pairs per row")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-packing-") as scratch:
        bench_packing(Path(scratch), options.pairs)


def bench_packing(root: Path, pairs: int) -> None:
    rows, refusals = [], []
    for recipe, stages in RECIPES.items():
        for packing in (False, True):
            overrides = _overrides(recipe, stages, packing)
            try:
                jobs = plain_trl_jobs(overrides, root / "plain")
            except RecipeError as refusal:
                rows.append([recipe, "on" if packing else "off", *["refused"] * 4])
                refusals.append(f"{recipe}, packing {'on' if packing else 'off'}: {refusal}")
                continue
            engine, plain = [], []
            for pair in range(pairs):
                engine.append(_engine(overrides, root / f"engine-{recipe}-{packing}-{pair}"))
                plain.append(_plain(jobs))
            rows.append([recipe, "on" if packing else "off", *_medians(engine), *_medians(plain)])
    header = ["recipe", "packing", "engine wall s", "engine tok/s", "TRL wall s", "TRL tok/s"]
    print(f"engine / plain TRL on the CPU, {STEPS} steps a stage, medians of {pairs} pair(s)")
    print("\n".join(text_table(rows, header=header)))
    print("\n".join(f"refused: {refusal}" for refusal in refusals))


def _overrides(recipe: str, stages: tuple[str, ...], packing: bool) -> list[str]:
    # `++`: set or add, as the templates set none of these keys
    settings = [f"++stage.{s}.train.max_steps={STEPS}" for s in stages]
    if packing:
        settings += [f"++stage.{s}.train.{option}" for s in stages for option in PACKED]
    return [f"recipe={recipe}", *QUIET, *settings]


def _medians(runs: list[Measured]) -> list[str]:
    wall = statistics.median(r.wall_s for r in runs)
    rate = statistics.median(r.tokens_per_s for r in runs)
    return [f"{wall:.1f}", f"{rate:,.0f}"]


def _engine(overrides: list[str], output_root: Path) -> Measured:
    wall, _ = timed(
        [sys.executable, "-m", "recipe_engine", *overrides, f"output_root={output_root}"]
    )
    stages = [json.loads(m.read_text())["stage"] for m in output_root.glob("store/*/manifest.json")]
    logs = [stage_log(output_root, stage) for stage in stages]
    tokens, seconds = sum(x.num_tokens for x in logs), sum(x.train_runtime for x in logs)
    return Measured(wall, tokens / seconds)


def _plain(jobs: list[JsonObject]) -> Measured:
    wall, printed = timed([sys.executable, "-c", PLAIN_TRL_STAGES, json.dumps(jobs)])
    tokens, seconds = json.loads(printed.strip().splitlines()[-1])
    return Measured(wall, tokens / seconds)


def plain_trl_jobs(overrides: list[str], output_dir: Path) -> list[JsonObject]:
    """What the plain script needs for each stage in order (as JSON), from the engine's plan
    of the same recipe; a stage that starts from another starts from its saved folder."""
    plan = plan_from_config(compose_config(overrides))
    jobs: list[JsonObject] = []
    for name in plan.graph.order:
        stage = plan.stages[name]
        model = (
            str(output_dir / stage.parent)
            if stage.parent
            else str(build_tiny_model(stage.model.id))
        )
        jobs.append(_job(stage, model, output_dir / name))
    return jobs


def _job(stage: StagePlan, model: str, output_dir: Path) -> JsonObject:
    policy = stage.policy
    trainer = {
        k: v
        for k, v in stage.trainer.items()
        if k not in ("save_strategy", "save_steps", "save_total_limit")
    }
    return {
        "model": model,
        "vlm": stage.model.kind == "vlm",
        "data": str(build_dataset(stage.data.config.path)),
        "dtype": stage.dtype,
        "quantization": policy.quantization.config if policy.quantization else None,
        "lora": policy.lora.config if policy.lora else None,
        # Without LoRA: the parameters of the trained components, by the layout's first match.
        "rules": [list(rule) for rule in policy.layout.rules] if policy.layout else [],
        "trained": list(policy.trained),
        "trainer": {**trainer, "save_strategy": "no", "output_dir": str(output_dir)},
    }


# The plain script, run as `python -c` so that it imports nothing of the engine: each stage
# loaded, frozen as planned, trained with SFTTrainer and saved for the next; it prints the
# training tokens and seconds of all stages.
PLAIN_TRL_STAGES = """
import json, re, sys
from pathlib import Path
import datasets, torch
from peft import LoraConfig
from transformers import (AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor,
    BitsAndBytesConfig)
from trl import SFTConfig, SFTTrainer

tokens = seconds = 0.0
for job in json.loads(sys.argv[1]):
    data = Path(job["data"])
    rows = datasets.load_dataset("json", data_files=str(data / "train.jsonl"), split="train")
    if job["vlm"]:
        rows = rows.map(lambda row: {"images": [str(data / path) for path in row["images"]]})
        rows = rows.cast_column("images", datasets.Sequence(datasets.Image()))
    extra = {}
    if job["quantization"]:
        quant = dict(job["quantization"])
        quant["bnb_4bit_compute_dtype"] = getattr(torch, quant["bnb_4bit_compute_dtype"])
        extra["quantization_config"] = BitsAndBytesConfig(**quant)
    auto = AutoModelForImageTextToText if job["vlm"] else AutoModelForCausalLM
    model = auto.from_pretrained(job["model"], dtype=getattr(torch, job["dtype"]), **extra)
    if not job["lora"]:
        rules = [(component, re.compile(rx)) for component, rx in job["rules"]]
        for name, param in model.named_parameters():
            first = next((c for c, rx in rules if rx.match(name)), None)
            param.requires_grad = first in job["trained"]
    trainer = SFTTrainer(
        model=model, args=SFTConfig(**job["trainer"]), train_dataset=rows,
        processing_class=AutoProcessor.from_pretrained(job["model"]),
        peft_config=LoraConfig(**job["lora"]) if job["lora"] else None,
    )
    result = trainer.train()
    seconds += result.metrics["train_runtime"]
    logged = [r["num_tokens"] for r in trainer.state.log_history if "num_tokens" in r]
    tokens += logged[-1]
    trainer.save_model(job["trainer"]["output_dir"])
    trainer.processing_class.save_pretrained(job["trainer"]["output_dir"])
print(json.dumps([tokens, seconds]))
"""


if __name__ == "__main__":
    main()
