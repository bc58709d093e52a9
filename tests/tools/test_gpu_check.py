"""`python -m tools.gpu_check` on a machine without CUDA: arguments, selection, the
report and its exit code. The checks themselves need a CUDA GPU (`make gpu-check`)."""

from __future__ import annotations

import pytest
import torch

from tools import gpu_check
from tools.gpu_check import (
    CHECKS,
    FAIL,
    PASS,
    SKIP,
    Check,
    CheckFailed,
    CheckSkipped,
    Result,
    exit_code,
    main,
    render_markdown,
    render_text,
    run_check,
    select,
)

NAMES = [check.name for check in CHECKS]
RESULTS = [
    Result("default-bf16", PASS, 12.34, "vision: autocast=True (bfloat16)"),
    Result("fsdp", SKIP, 0.0, "one GPU"),
    Result("memory-estimate", FAIL, 3.0, "estimated 10.0 MiB, peak 20.0 MiB (-50.0%)"),
]


def test_list_prints_every_check_without_cuda(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in NAMES)
    assert len(NAMES) == 8 and "resume-after-kill" in NAMES and "fused-head" in NAMES


def test_dry_run_names_the_selected_checks_and_runs_none(capsys):
    assert main(["--dry-run", "fsdp", "qlora-4bit"]) == 0
    out = capsys.readouterr().out
    assert "fsdp" in out and "qlora-4bit" in out and "default-bf16" not in out
    assert "2 check(s) selected, none run" in out


def test_an_unknown_check_is_one_message_and_exit_2(capsys):
    assert main(["fsdp", "warp-drive"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown check warp-drive; known: ")
    assert len(err.splitlines()) == 1


def test_an_unknown_flag_is_one_message_and_exit_2(capsys):
    assert main(["--fast"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["error: unrecognized arguments: --fast"]


def test_without_cuda_it_says_a_cuda_gpu_is_needed_and_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only machine
    out = tmp_path / "report.md"
    assert main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "torch sees none" in err
    assert not out.exists()


def test_selection_keeps_the_table_order():
    assert [c.name for c in select([])] == NAMES
    assert [c.name for c in select(["memory-estimate", "fsdp"])] == ["fsdp", "memory-estimate"]


def test_a_failure_fails_the_run_and_a_skip_does_not():
    assert exit_code(RESULTS) == 1
    assert exit_code([r for r in RESULTS if r.outcome != FAIL]) == 0
    assert exit_code([]) == 0


def test_text_and_markdown_reports_list_every_result():
    text = render_text(RESULTS)
    assert text.splitlines()[0].split() == ["check", "result", "seconds", "detail"]
    assert "default-bf16     PASS    12.3" in text
    assert text.endswith("1 passed, 1 failed, 1 skipped")
    markdown = render_markdown(RESULTS, {"date": "2026-01-02", "gpu": "H100", "torch": "2.14"})
    assert markdown.startswith("# GPU check 2026-01-02\n")
    assert "- gpu: H100" in markdown
    assert "| fsdp            | SKIP   | 0.0     | one GPU" in markdown


def _body(raised: Exception | None):
    def body(root):
        assert root.is_dir()  # every check gets its own scratch output_root
        if raised is not None:
            raise raised
        return "fine"

    return body


@pytest.mark.parametrize(
    ("raised", "outcome", "detail"),
    [
        (None, PASS, "fine"),
        (CheckSkipped("no GGUF model"), SKIP, "no GGUF model"),
        (CheckFailed("n_gpu=2"), FAIL, "n_gpu=2"),
        (KeyError("steps"), FAIL, "KeyError: 'steps'"),  # a crash is that check's failure
    ],
)
def test_run_check_turns_what_a_body_raises_into_its_result(raised, outcome, detail):
    result = run_check(Check("x", "a check", _body(raised)))
    assert (result.name, result.outcome, result.detail) == ("x", outcome, detail)
    assert isinstance(result.seconds, float) and 0 <= result.seconds < 60  # measured, not a stub


def test_out_writes_the_markdown_report_and_the_exit_code_follows_it(monkeypatch, tmp_path):
    # The harness around the checks (CUDA itself is what this machine lacks).
    checks = (Check("good", "", _body(None)), Check("bad", "", _body(CheckFailed("no"))))
    monkeypatch.setattr(gpu_check, "CHECKS", checks)
    monkeypatch.setattr(gpu_check, "cuda_missing", lambda: None)
    out = tmp_path / "gpu" / "report.md"
    assert main(["--out", str(out)]) == 1
    report = out.read_text()
    assert "| good  | PASS" in report and "| bad   | FAIL" in report
    assert "- transformers: " in report and "- date: " in report
    assert main(["good", "--out", str(out)]) == 0
