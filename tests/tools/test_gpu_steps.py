"""How the GPU report runs its steps: each within its limit and the budget, failures and what
could not run said with why, steps that time nothing side by side, `--only`, and the logs."""

from __future__ import annotations

import os
import sys
import tarfile
import time

import pytest

from tools.gpu_report import write_report
from tools.gpu_steps import FAILED, NOT_RUN, RAN, Machine, Session, Step


def python_step(
    name: str, code: str, limit_s: int = 60, needs: tuple[str, ...] = (), **fields: object
) -> Step:
    return Step("Section", name, (sys.executable, "-c", code), limit_s, needs, **fields)


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


def test_a_failures_reason_is_its_last_error_line_and_its_result_reads_only_stdout(session):
    code = "import sys; print('42 tokens/s'); print('a warning', file=sys.stderr)"
    read = session.run(python_step("read", code, result=lambda printed: printed.strip()))
    assert read.result == "42 tokens/s"
    code = "import sys; print('fine so far'); sys.exit('error: no GPU memory left')"
    failed = session.run(python_step("dies", code))
    assert failed.result == "exit 1: error: no GPU memory left"


def test_a_step_after_the_budget_is_spent_is_not_run(tmp_path):
    spent = Session(tmp_path, Machine("NVIDIA H100", frozenset()), dry=False, budget_s=0)
    outcome = spent.run(python_step("late", "print(1)"))
    assert outcome.status == NOT_RUN and "out of time" in outcome.result


def test_steps_that_time_nothing_run_side_by_side_and_timed_ones_alone(session, tmp_path):
    """Each of the two side-by-side steps waits for the other's file: run one after the other,
    the first would reach its limit. The timed step starts after both have ended."""
    wait_for = (
        "import pathlib, sys, time\n"
        "here, other = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
        "here.touch()\n"
        "while not other.exists():\n"
        "    time.sleep(0.05)\n"
    )
    a, b, timed = tmp_path / "a", tmp_path / "b", tmp_path / "timed"
    beside = [
        Step("S", "a", (sys.executable, "-c", wait_for, str(a), str(b)), 20, (), alone=False),
        Step("S", "b", (sys.executable, "-c", wait_for, str(b), str(a)), 20, (), alone=False),
    ]
    alone_code = f"import pathlib; print(pathlib.Path({str(a)!r}).exists()); "
    alone_code += f"pathlib.Path({str(timed)!r}).touch()"
    session.run_steps([*beside, python_step("timed", alone_code)])
    assert [(o.step.name, o.status) for o in session.outcomes] == [
        ("a", RAN), ("b", RAN), ("timed", RAN),
    ]  # fmt: skip
    assert timed.exists()


def test_a_step_at_its_limit_is_stopped_with_every_process_it_started(session, tmp_path):
    """Like torchrun's workers: a child in the step's process group must not outlive it."""
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time, pathlib\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    outcome = session.run(python_step("parent", code, limit_s=3))
    assert outcome.status == FAILED and "stopped at its limit (3 s)" in outcome.result
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the step's child {child} outlived it")


def test_only_runs_the_picked_groups_and_the_steps_that_serve_them(tmp_path):
    picky = Session(tmp_path, Machine("", frozenset()), dry=False, only=("memory", "fast:one"))
    steps = [
        python_step("install", "print(1)"),  # no group: serves every group
        python_step("shape", "print(1)", group="setup", serves=("fast",)),
        python_step("one", "print(1)", group="fast"),
        python_step("two", "print(1)", group="fast"),
        python_step("bench", "print(1)", group="memory"),
        python_step("other", "print(1)", group="slow"),
    ]
    picky.run_steps(steps)
    statuses = {o.step.name: o.status for o in picky.outcomes}
    assert statuses == {"install": RAN, "shape": RAN, "one": RAN, "two": NOT_RUN,
                        "bench": RAN, "other": NOT_RUN}  # fmt: skip
    assert picky.outcomes[3].result == "not picked (--only memory fast:one)"


def test_every_steps_whole_output_is_kept_in_one_archive(session, tmp_path):
    session.run(python_step("talks", "import sys; print('out'); print('err', file=sys.stderr)"))
    run_log = tmp_path / "run-root" / "runs" / "job.log"  # a run's own log under its root
    run_log.parent.mkdir(parents=True)
    run_log.write_text("step 5 of 20")
    archive = session.keep_logs(tmp_path / "out" / "logs.tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        assert {"logs/talks.stdout.log", "logs/talks.stderr.log", "run-root/runs/job.log"} <= names
        assert tar.extractfile("logs/talks.stderr.log").read() == b"err\n"


def test_steps_share_the_engine_cache_the_report_laid_under_its_folder(tmp_path, monkeypatch):
    from tools.gpu_models import TINY_CACHE
    from tools.gpu_steps import step_env

    monkeypatch.delenv("RECIPE_ENGINE_CACHE", raising=False)
    assert "RECIPE_ENGINE_CACHE" not in step_env(tmp_path)
    (tmp_path / TINY_CACHE).mkdir()
    env = step_env(tmp_path)
    assert env["RECIPE_ENGINE_CACHE"] == str(tmp_path / TINY_CACHE)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "site-packages")
