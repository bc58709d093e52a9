"""The plain-TRL benchmark's script gets the same stage the engine plans (no timing here)."""

from __future__ import annotations

import json

from tools.bench_scale import Run, Settings, overrides, scale_shapes
from tools.bench_trl import (
    QUIET,
    bench_engine_against_plain_trl,
    plain_trl_job,
    stage_log,
    steady_rate,
)
from tools.scale_models import Variant, build_scale_model


def test_the_plain_script_is_handed_the_engines_resolved_library_arguments(tmp_path):
    job = plain_trl_job(["recipe=r1-llm-only", "device=cpu", *QUIET], tmp_path / "plain")
    assert job["quantization"]["load_in_4bit"] and job["quantization"]["llm_int8_skip_modules"]
    assert job["lora"]["r"] == 16 and "lm_head" in job["lora"]["modules_to_save"]
    assert all("language_model" in target for target in job["lora"]["target_modules"])
    assert job["trainer"]["learning_rate"] == 5e-3 and job["trainer"]["num_train_epochs"] == 4
    # Nothing of the engine's checkpointing: the plain script saves nothing.
    assert job["trainer"]["save_strategy"] == "no" and "save_steps" not in job["trainer"]
    assert job["trainer"]["output_dir"] == str(tmp_path / "plain")
    json.dumps(job)  # the job travels to the script as JSON


def test_the_stage_log_reads_steps_runtime_and_tokens_of_the_stored_stage(tmp_path):
    entry = tmp_path / "store" / "abc"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text(json.dumps({"stage": "llm"}))
    records = [{"step": 10, "loss": 1.0, "num_tokens": 4000.0}, {"step": 20, "train_runtime": 8.0}]
    (entry / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    log = stage_log(tmp_path, "llm")
    assert (log.steps, log.train_runtime, log.num_tokens) == (20, 8.0, 4000.0)
    assert log.steady_rate != log.steady_rate  # nan: no two timed records


def test_the_steady_rate_leaves_the_first_logged_step_out():
    records = [{"step": 1, "time": 10.0, "num_tokens": 1000.0},
               {"step": 5, "time": 12.0, "num_tokens": 5000.0},
               {"step": 10, "time": 14.0, "num_tokens": 10000.0, "train_runtime": 9.0}]  # fmt: skip
    assert steady_rate(records) == 9000.0 / 4.0


def test_at_a_scale_model_the_plain_script_gets_the_stage_the_engine_resolved(tmp_path):
    """`bench_trl --scale`'s plain side on a tied VLM at Qwen2-VL-2B's widths (one layer): the
    built folder, the 448 px pictures, 4-bit with the engine's skipped modules, LoRA on the
    language model's linears only, and lm_head frozen with its tied embeddings (not saved)."""
    folder = build_scale_model("qwen2-vl-2b", Variant(depth=1))
    chosen = overrides(Run("r1-llm-only", "qwen2-vl-2b"), Settings(10, 8), folder, tmp_path)
    job = plain_trl_job([*chosen, *QUIET], tmp_path / "plain")
    assert job["model"] == str(folder) and job["data"] == str(scale_shapes(448))
    assert (
        job["quantization"]["load_in_4bit"]
        and "model.visual" in (job["quantization"]["llm_int8_skip_modules"])
    )
    assert job["lora"]["target_modules"] and job["lora"]["modules_to_save"] is None
    assert all(".language_model.layers.0." in t for t in job["lora"]["target_modules"])
    assert (job["trainer"]["max_steps"], job["trainer"]["per_device_train_batch_size"]) == (10, 8)


def test_the_dry_run_plans_the_engines_command_and_makes_the_plain_job(tmp_path, capsys):
    """`--dry-run --scale` (the GPU report's dry mode): nothing is built or trained; the engine's
    command is planned for the card asked and the plain script's job is made from that plan."""
    bench_engine_against_plain_trl(
        tmp_path, "cuda", "qwen2-vl-2b", dry=True, hardware="1x-h100-80gb"
    )
    printed = capsys.readouterr().out
    assert "$ python -m recipe_engine recipe=r1-llm-only model=qwen2-vl-2b" in printed
    assert "device=cuda hardware=1x-h100-80gb" in printed
    assert printed.splitlines()[-1].startswith(
        "dry run: the engine's stage planned; the plain TRL job: 10 steps of 8 rows, bfloat16"
    )
    assert not (tmp_path / "engine").exists()  # nothing ran
