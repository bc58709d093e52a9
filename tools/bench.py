"""Benchmarks: the speed goals, measured and printed (`make bench`).

- `plan` for every shipped recipe (goal: under 5 s each; it loads no weights);
- the default two-stage run, then the same command again (goal: the cached rerun takes
  under 15% of the first run's wall time);
- a three-value sweep over the llm stage's learning rate against one vision stage plus three
  llm stages run back to back (goal: within 10%);
- the engine against plain TRL, without and with packing, for text-lora and r3-two-stage:
  wall time and training tokens/s, medians of 3 pairs (`tools/bench_packing.py`).

Each figure is the wall time of a fresh `python -m recipe_engine` process, as a user sees it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recipe_engine.config.compose import available
from tools.bench_packing import bench_packing

QUIET = ["eval.compare=false"]


def timed(*args: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "recipe_engine", *args], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"`{' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return elapsed


def bench_plan() -> None:
    print("plan (goal < 5 s each)")
    timed("plan")  # warm the tiny-model and field caches once
    for recipe in available("recipe"):
        print(f"  {recipe:<16} {timed('plan', f'recipe={recipe}'):6.2f} s")


def bench_cached_rerun(root: Path) -> None:
    args = ["recipe=r3-two-stage", f"output_root={root / 'rerun'}", *QUIET]
    first = timed(*args)
    second = timed(*args)
    print("r3-two-stage twice (goal: second < 15% of first)")
    print(f"  first {first:6.1f} s   second (cached) {second:6.1f} s   ratio {second / first:.1%}")


def bench_sweep(root: Path) -> None:
    rates = ["1e-4", "2e-4", "3e-4"]
    sweep = timed(
        "-m",
        "recipe=r3-two-stage",
        f"stage.llm.train.learning_rate={','.join(rates)}",
        f"output_root={root / 'sweep'}",
        *QUIET,
    )
    serial = timed("recipe=r2-vision-only", f"output_root={root / 'serial'}", *QUIET)
    for rate in rates:
        serial += timed(
            "recipe=r3-two-stage",
            f"stage.llm.train.learning_rate={rate}",
            f"output_root={root / 'serial'}",
            *QUIET,
        )
    print("sweep of 3 llm learning rates (goal: within 10% of 1 vision + 3 llm run back to back)")
    print(f"  sweep {sweep:6.1f} s   back to back {serial:6.1f} s   ratio {sweep / serial:.2f}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_plan()
        bench_cached_rerun(Path(tmp))
        bench_sweep(Path(tmp))
        bench_packing(Path(tmp), pairs=3)


if __name__ == "__main__":
    main()
