"""torch.profiler around a real engine run's optimizer steps (`tools.profile_step`)."""

from __future__ import annotations

import re

from engine_cli import forked_engine


def test_a_profiled_window_of_an_engine_runs_steps_says_where_their_time_went(tmp_path):
    prelude = tmp_path / "arm.py"
    prelude.write_text("from tools.profile_step import arm\narm(2, 2)\n")
    done = forked_engine(
        "recipe=text-lora", "++stage.llm.train.max_steps=5", "data.max_samples=16",
        "eval.enabled=false", "eval.compare=false", f"output_root={tmp_path / 'out'}",
        cwd=tmp_path, prelude=prelude,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "top 15 operators by the host's own time:" in done.stdout
    assert "aten::mm" in done.stdout  # the model's own operators, not the profiler's
    summary = re.search(r"per optimizer step over 2: ([\d.]+) ms wall, device kernels "
                        r"([\d.]+) ms \(0% busy\), 0 kernel launches", done.stdout)  # fmt: skip
    assert summary and float(summary[1]) > 0 and float(summary[2]) == 0.0  # a CPU: no kernels
    # The run itself went on to its commit, as it would have without the profiler.
    assert list((tmp_path / "out" / "store").glob("*/manifest.json"))
