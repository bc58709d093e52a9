"""`make gpu-report`: the dry mode end to end on this CPU machine (the report it writes), and
how a step that fails, cannot run here or runs out of time is reported."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from recipe_engine.tools.gpu_report import (
    FAILED,
    NOT_RUN,
    RAN,
    Machine,
    Session,
    Step,
    all_steps,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (
    "## gpu-check",
    "## Engine against plain TRL",
    "## SmolLM2-135M throughput",
    "## CUDA memory, every bench-memory configuration",
    "## DeepSpeed and FSDP, run to commit",
    "## A merged export served by vLLM",
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
    # The CPU-possible step ran (gpu_check's own dry run); every GPU step is listed as not run.
    assert re.search(r"\| gpu_check +\| ran +\|", report)
    not_run = report.split("## Not run")[1]
    steps = all_steps(tmp_path, "")
    assert len(steps) == 18  # 9 throughputs, 3 distributed, gpu-check, memory, TRL, 3 export
    for step in (s for s in steps if s.name != "gpu_check"):
        assert f"`{step.name}`: dry mode" in not_run
    assert "no wheels in" in not_run
    # The exact commands it would run are printed and written.
    assert "recipe=r2-vision-only parallel=fsdp device=cuda" in done.stdout
    assert "'stage.llm.freeze.components=[embeddings,lm_head]'" in report
    assert "--compare-vllm" in report and "bench_memory --device cuda" in report


def python_step(name: str, code: str, limit_s: int = 60, needs: tuple[str, ...] = ()) -> Step:
    return Step("Section", name, (sys.executable, "-c", code), limit_s, needs)


@pytest.fixture
def session(tmp_path) -> Session:
    return Session(tmp_path, Machine("", frozenset({"deepspeed"})), dry=False)


def test_a_step_runs_fails_or_is_not_run_with_why(session, tmp_path):
    ok = session.run(python_step("ok", "print('measured 5 tokens/s')"))
    failed = session.run(python_step("broken", "import sys; print('boom'); sys.exit(3)"))
    needs_gpu = session.run(python_step("gpu", "print(1)", needs=("cuda",)))
    needs_vllm = session.run(python_step("vllm", "print(1)", needs=("vllm",)))
    slow = session.run(python_step("slow", "import time; time.sleep(30)", limit_s=1))
    assert (ok.status, ok.result) == (RAN, "exit 0")
    assert (
        failed.status == FAILED and failed.result.startswith("exit 3") and "boom" in failed.output
    )
    assert (needs_gpu.status, needs_gpu.result) == (NOT_RUN, "no CUDA")
    assert (needs_vllm.status, needs_vllm.result) == (NOT_RUN, "vllm not installed")
    assert slow.status == FAILED and "limit" in slow.result
    report = write_report(session, tmp_path / "docs").read_text()
    assert "boom" in report  # a failed step's last lines are in the report
    assert "- Section: `vllm`: vllm not installed" in report
    assert "- Section: `ok`" not in report


def test_a_step_after_the_budget_is_spent_is_not_run(tmp_path):
    spent = Session(tmp_path, Machine("NVIDIA H100", frozenset()), dry=False, budget_s=0)
    outcome = spent.run(python_step("late", "print(1)"))
    assert outcome.status == NOT_RUN and "out of time" in outcome.result


def test_throughput_is_read_from_the_stage_log_with_its_mfu(tmp_path):
    from recipe_engine.tools.gpu_report import tokens_per_second

    entry = tmp_path / "store" / "abc123"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text('{"stage": "llm"}')
    records = [{"step": 10, "num_tokens": 5e5}, {"step": 20, "train_runtime": 2.0}]
    (entry / "metrics.jsonl").write_text("\n".join(map(str, records)).replace("'", '"'))
    # 250,000 tokens/s * 6 * 134.5e6 FLOPs = 201.75 TFLOP/s of an H100's 989: 20.4%.
    assert tokens_per_second(tmp_path, "NVIDIA H100 80GB HBM3") == (
        "250,000 tokens/s, MFU 20.4% (20 steps)"
    )
    assert "MFU n/a (unknown card)" in tokens_per_second(tmp_path, "Some GPU")
