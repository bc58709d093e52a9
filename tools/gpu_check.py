"""GPU checks: what only a CUDA machine can show (`make gpu-check`; not part of `make test`).

    python -m tools.gpu_check [CHECK ...] [--out docs/gpu/gpu-check-DATE.md]
    python -m tools.gpu_check --list | --dry-run

Each check is a real `python -m recipe_engine` run in its own scratch output_root (a temporary
folder), offline, on the tiny models `recipe_engine.tiny` builds on the spot:

  default-bf16       the default recipe with device=cuda: bf16 with torch autocast on in the forward
  qlora-4bit         r1-llm-only: bitsandbytes' 4-bit weights sit on cuda
  placement-guard    the built trainer: n_gpu == 1, device_map {"": 0}, no nn.DataParallel,
                     every parameter on cuda:0
  fsdp               parallel=fsdp with one process per GPU
  preflight-dtype    a planted bf16 layer in a float32 stage: the preflight names the dtype
                     mismatch before step 0
  resume-after-kill  SIGKILL after the first complete checkpoint; the rerun resumes from it
  memory-estimate    the plan's peak estimate against torch.cuda.max_memory_allocated
  fused-head         the estimate's `logits` part covers the tile TRL's fused LM head projected
                     (its rows and dtype in each stage's first forward: SFT on a VLM, text DPO)

Checks that look inside the trainer run the engine through `gpu_probe.probe_run`, which wraps
the stage's guard-and-preflight step and writes what it saw as JSON lines. The report (stdout,
and Markdown with --out) lists check, result, seconds and detail; exit 0 only when no selected
check failed (a skip is not a pass, and is shown as one), 1 when one failed, 2 for bad input or
no CUDA.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from recipe_engine.store.records import Manifest
from recipe_engine.tables import markdown_table, text_table
from recipe_engine.versions import package_version
from tools.gpu_probe import (
    PLANT_BF16_LAYER,
    PROBE,
    PROBE_FILE,
    ForwardFacts,
    ProbeRecord,
    read_probes,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PASS, FAIL, SKIP = "pass", "fail", "skip"
HEADER = ["check", "result", "seconds", "detail"]
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes")
MEMORY_GOAL_PCT = 15.0  # the same per-configuration goal as `make bench-memory` on CPU
RUN_TIMEOUT_S = 900
# Small and offline: a handful of optimizer steps on the tiny models; no evaluation pass.
SMALL = ("data.max_samples=16", "eval.enabled=false", "eval.compare=false")


class CheckFailed(Exception):
    """The check ran and what it asserts does not hold."""


class CheckSkipped(Exception):
    """The check cannot run here (e.g. a missing optional package); not a pass."""


@dataclass(frozen=True)
class Check:
    name: str
    summary: str
    body: Callable[[Path], str]  # scratch output_root -> detail; raises CheckFailed/CheckSkipped


@dataclass(frozen=True)
class Result:
    name: str
    outcome: str  # pass | fail | skip
    seconds: float
    detail: str


# --- running the engine ---------------------------------------------------------------------


def engine(root: Path, *args: str, probe: str = "") -> subprocess.CompletedProcess:
    """`python -m recipe_engine ARGS output_root=ROOT`; with `probe`, through `probe_run`
    writing what the trainer looked like to ROOT/probe.jsonl (PLANT_BF16_LAYER plants
    the dtype mismatch of the preflight check)."""
    full = [*args, f"output_root={root}"]
    command = (
        [sys.executable, "-c", PROBE, str(root / PROBE_FILE), probe or "-", *full]
        if probe
        else [sys.executable, "-m", "recipe_engine", *full]
    )
    return subprocess.run(
        command, capture_output=True, text=True, env=offline_env(), timeout=RUN_TIMEOUT_S
    )


def offline_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def require_success(done: subprocess.CompletedProcess) -> None:
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise CheckFailed(f"the run exited {done.returncode}: {' / '.join(tail)}")


def probes(root: Path) -> list[ProbeRecord]:  # what `probe_run` wrote: one per stage
    path = root / PROBE_FILE
    if not path.is_file():
        raise CheckFailed("the run never reached a stage's guard (no probe record)")
    return read_probes(path)


def manifests(root: Path) -> dict[str, Manifest]:
    """Committed store entries by stage name."""
    found = (root / "store").glob("*/manifest.json")
    entries = [path.parent for path in found if (path.parent / "COMPLETE").is_file()]
    return {manifest.stage: manifest for manifest in map(Manifest.load, entries)}


# --- the checks -----------------------------------------------------------------------------


def check_default_bf16(root: Path) -> str:
    done = engine(root, "device=cuda", *SMALL, *max_steps("vision", "llm"), probe="observe")
    require_success(done)
    seen = probes(root)
    for record in seen:
        stage, trainer, forward = record.stage, record.trainer, record.forward
        if not (trainer.bf16 and trainer.mixed_precision == "bf16"):
            raise CheckFailed(f"{stage}: bf16={trainer.bf16}, {trainer.mixed_precision}")
        if not (forward and forward.autocast and forward.autocast_dtype == "bfloat16"):
            raise CheckFailed(f"{stage}: autocast in the forward: {_autocast(forward)}")
    return "; ".join(f"{r.stage}: {_autocast(r.forward)}" for r in seen)


def _autocast(forward: ForwardFacts | None) -> str:
    if forward is None:
        return "autocast=None (None)"  # no forward ran
    return f"autocast={forward.autocast} ({forward.autocast_dtype})"


QLORA_STAGE = ("recipe=r1-llm-only", "device=cuda", *SMALL, "stage.llm.train.max_steps=4")


def check_qlora_4bit(root: Path) -> str:
    done = engine(root, *QLORA_STAGE, probe="observe")
    require_success(done)
    (record,) = probes(root)
    facts = record.trainer
    if facts.params_4bit == 0:
        raise CheckFailed("no bitsandbytes Params4bit in the model: the stage was not quantized")
    if any(not d.startswith("cuda") for d in facts.params_4bit_devices):
        raise CheckFailed(f"4-bit weights on {facts.params_4bit_devices}")
    return f"{facts.params_4bit} Params4bit on {', '.join(facts.params_4bit_devices)}"


def check_placement_guard(root: Path) -> str:
    done = engine(root, *QLORA_STAGE, probe="observe")
    require_success(done)
    (record,) = probes(root)
    trainer = record.trainer
    facts = {
        "n_gpu == 1": trainer.n_gpu == 1,
        'device_map == {"": 0}': trainer.device_map == {"": 0},
        "not nn.DataParallel": not trainer.data_parallel,
        "parameters on cuda:0": trainer.param_devices == ["cuda:0"],
    }
    broken = [name for name, holds in facts.items() if not holds]
    if broken:
        raise CheckFailed(f"does not hold: {', '.join(broken)} (trainer: {record.to_json()})")
    return ", ".join(facts)


def check_fsdp(root: Path) -> str:
    import torch

    gpus = torch.cuda.device_count()
    args = ("recipe=r2-vision-only", "device=cuda", "parallel=fsdp", *SMALL, *max_steps("vision"))
    plan = planned(root, *args)
    placement = plan.stages["vision"].placement
    if placement.mode != "fsdp" or placement.world_size != gpus:
        raise CheckFailed(f"planned {placement.mode} x {placement.world_size}, {gpus} GPU(s)")
    require_success(engine(root, *args))
    vision = manifests(root).get("vision")
    if vision is None:
        raise CheckFailed("the run exited 0 but committed no vision stage")
    return f"fsdp, world size {placement.world_size}, {vision.metrics.steps} steps"


def check_preflight_dtype(root: Path) -> str:
    args = ("recipe=r1-llm-only", "device=cuda", "stage.llm.dtype=float32", *SMALL)
    done = engine(root, *args, *max_steps("llm"), probe=PLANT_BF16_LAYER)
    wanted = "The preflight forward/backward failed before step 0 with a dtype mismatch"
    if done.returncode == 0:
        raise CheckFailed("the planted bf16 layer trained without an error")
    if wanted not in done.stderr:
        raise CheckFailed(f"failed, but not in the preflight: {done.stderr.strip()[-300:]}")
    if manifests(root):
        raise CheckFailed("a stage was committed after the preflight failed")
    return f"exit {done.returncode}: {wanted}"


RESUME_STEPS, RESUME_SAVE_STEPS = 100, 10  # room to kill between the first and last checkpoint


def check_resume_after_kill(root: Path) -> str:
    args = ("recipe=r1-llm-only", "device=cuda", *SMALL, "stage.llm.train.logging_steps=1")
    args = (
        *args,
        f"stage.llm.train.max_steps={RESUME_STEPS}",
        f"stage.llm.train.save_steps={RESUME_SAVE_STEPS}",
    )
    fingerprint = planned(root, *args).stages["llm"].fingerprint
    killed_at = kill_after_first_checkpoint(root, args, fingerprint)
    done = engine(root, *args)
    require_success(done)
    marker = "stage llm: resuming from "
    output = (done.stdout + done.stderr).splitlines()
    resumed = [line.split(marker, 1)[1] for line in output if marker in line]
    if not resumed:
        raise CheckFailed(f"the rerun did not resume (killed at {killed_at})")
    steps = manifests(root)["llm"].metrics.steps
    if steps != RESUME_STEPS:
        raise CheckFailed(f"the resumed stage ended at step {steps}, not {RESUME_STEPS}")
    return f"killed after {killed_at}; resumed from {Path(resumed[0].strip()).name}; {steps} steps"


def kill_after_first_checkpoint(root: Path, args: Sequence[str], fingerprint: str) -> str:
    from recipe_engine.store.store import Store

    store = Store(str(root))
    command = [sys.executable, "-m", "recipe_engine", *args, f"output_root={root}"]
    child = subprocess.Popen(
        command, env=offline_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline and child.poll() is None:
            complete = store.complete_checkpoints(fingerprint)
            if complete:
                child.send_signal(signal.SIGKILL)
                child.wait()
                return complete[0].name
            time.sleep(0.05)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    raise CheckFailed(f"no checkpoint before the run ended (exit {child.returncode})")


def check_memory_estimate(root: Path) -> str:
    done = engine(root, *QLORA_STAGE)
    require_success(done)
    metrics = manifests(root)["llm"].metrics
    estimated, measured = metrics.estimated_peak_gib, metrics.measured_peak_gib
    if metrics.memory_measure != "cuda max_memory_allocated":
        raise CheckFailed(f"measured with {metrics.memory_measure!r}")
    if not estimated or not measured:
        raise CheckFailed(f"estimate {estimated} GiB, measured {measured} GiB")
    error = 100 * (estimated - measured) / measured
    detail = f"estimated {estimated * 1024:.1f} MiB, peak {measured * 1024:.1f} MiB ({error:+.1f}%)"
    if abs(error) > MEMORY_GOAL_PCT:
        raise CheckFailed(f"{detail}: outside +-{MEMORY_GOAL_PCT:.0f}%")
    return detail


# Two SFT stages (a VLM's vision and language stages, assistant-only loss), then a text SFT
# stage and a DPO stage from it; each run's overrides, and its stages.
FUSED_HEAD_RUNS = (
    (("device=cuda", *SMALL), ("vision", "llm")),
    (("recipe=r5-sft-dpo-text", "device=cuda", *SMALL), ("llm", "dpo")),
)


def check_fused_head(root: Path) -> str:
    """The memory estimate's `logits` part covers the tile TRL's fused LM head really projected
    in each stage's first forward: its rows (on CUDA only the labelled positions) in its dtype
    (the autocast dtype under bf16 autocast), VOCAB_TILE wide."""
    from recipe_engine.plan.memory import GIB, TOKEN_TILE, VOCAB_TILE, WIDTH

    seen = []
    for number, (args, stages) in enumerate(FUSED_HEAD_RUNS):
        folder = root / f"run-{number}"
        steps = max_steps(*stages, steps=1)
        require_success(engine(folder, *args, *steps, probe="observe"))
        plan = planned(folder, *args, *steps)
        for record in probes(folder):
            memory = plan.stages[record.stage].memory
            if record.head is None or memory is None:
                raise CheckFailed(f"{record.stage}: head {record.head}, estimate {memory}")
            rows, dtype = record.head.head_rows, record.head.head_dtype
            tile = min(rows, TOKEN_TILE) * VOCAB_TILE * WIDTH[dtype] / GIB
            said = (f"{record.stage}: {rows} rows in {dtype} (tile {tile * 1024:.1f} MiB, "
                    f"estimate's logits {memory.estimate.logits * 1024:.1f} MiB)")  # fmt: skip
            if tile > memory.estimate.logits:
                raise CheckFailed(f"{said}: the estimate is under the tile")
            seen.append(said)
    return "; ".join(seen)


def max_steps(*stages: str, steps: int = 4) -> list[str]:
    return [f"stage.{stage}.train.max_steps={steps}" for stage in stages]


def planned(root: Path, *args: str) -> Any:
    """The engine's plan for these overrides, as `python -m recipe_engine plan` makes it
    (the same argv normalisation; torch-free; reads no weights)."""
    from recipe_engine.cli.argv import normalise_argv
    from recipe_engine.config.compose import compose_config
    from recipe_engine.run.planning import plan_from_config

    _, overrides, _ = normalise_argv(["plan", *args, f"output_root={root}"])
    return plan_from_config(compose_config(overrides))


CHECKS = (
    Check("default-bf16", "default recipe, device=cuda, bf16 autocast", check_default_bf16),
    Check("qlora-4bit", "r1-llm-only: bitsandbytes 4-bit weights on cuda", check_qlora_4bit),
    Check("placement-guard", "n_gpu=1, device_map {'': 0}, no DataParallel", check_placement_guard),
    Check("fsdp", "parallel=fsdp, one process per GPU", check_fsdp),
    Check("preflight-dtype", "a planted bf16 layer is caught before step 0", check_preflight_dtype),
    Check("resume-after-kill", "SIGKILL after a checkpoint; resumes", check_resume_after_kill),
    Check("memory-estimate", "plan estimate vs max_memory_allocated", check_memory_estimate),
    Check("fused-head", "the estimate covers TRL's fused-head tile", check_fused_head),
)


# --- running and reporting ------------------------------------------------------------------


def run_check(check: Check) -> Result:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{check.name}-") as tmp:
        try:
            outcome, detail = PASS, check.body(Path(tmp))
        except CheckSkipped as why:
            outcome, detail = SKIP, str(why)
        except CheckFailed as why:
            outcome, detail = FAIL, str(why)
        except Exception as error:  # a crash in a check is that check's failure, not the run's
            outcome, detail = FAIL, f"{type(error).__name__}: {error}"
    return Result(check.name, outcome, time.perf_counter() - started, detail)


def exit_code(results: Sequence[Result]) -> int:
    """0 when no check failed (skips neither pass nor fail the run), else 1."""
    return EXIT_FAILED if any(r.outcome == FAIL for r in results) else EXIT_OK


def rows(results: Sequence[Result]) -> list[list[str]]:
    return [[r.name, r.outcome.upper(), f"{r.seconds:.1f}", r.detail] for r in results]


def summary_line(results: Sequence[Result]) -> str:
    counts = {o: sum(r.outcome == o for r in results) for o in (PASS, FAIL, SKIP)}
    return f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"


def render_text(results: Sequence[Result]) -> str:
    return "\n".join([*text_table(rows(results), HEADER), "", summary_line(results)])


def render_markdown(results: Sequence[Result], environment: dict[str, str]) -> str:
    lines = [f"# GPU check {environment.get('date', '')}", ""]
    lines += [f"- {key}: {value}" for key, value in environment.items()]
    lines += ["", *markdown_table(rows(results), HEADER), "", summary_line(results), ""]
    return "\n".join(lines)


def environment() -> dict[str, str]:
    """Date, GPU and library versions, for the report's head."""
    import torch

    info = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}  # noqa: UP017
    if torch.cuda.is_available():
        info["gpu"] = f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}"
        info["cuda"] = str(torch.version.cuda)
    info.update({lib: package_version(lib) or "not installed" for lib in LIBRARIES})
    return info


def cuda_missing() -> str | None:
    """Why this machine cannot run the checks, or None."""
    import torch

    if torch.cuda.is_available():
        return None
    build = f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}"
    return (
        f"gpu-check needs a CUDA GPU, and torch sees none here ({build}). Run it on a CUDA "
        "machine (docs/gpu/README.md); --list shows the checks."
    )


# --- command line ---------------------------------------------------------------------------


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one message, exit 2: no usage dump
        raise UsageError(message)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = Parser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n")[0])
    parser.add_argument("checks", nargs="*", metavar="CHECK", help="run only these (default: all)")
    parser.add_argument("--out", type=Path, help="also write the report as Markdown here")
    parser.add_argument("--list", action="store_true", help="print the checks and exit")
    parser.add_argument("--dry-run", action="store_true", help="print what would run; run none")
    return parser.parse_args(list(argv))


def select(names: Sequence[str]) -> list[Check]:
    """The named checks in their table order; all of them when none is named."""
    known = {check.name for check in CHECKS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"unknown check {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [check for check in CHECKS if not names or check.name in names]


def listing(checks: Sequence[Check]) -> str:
    return "\n".join(text_table([[c.name, c.summary] for c in checks], ["check", "what it runs"]))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
        checks = select(options.checks)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if options.list or options.dry_run:
        print(listing(checks))
        if options.dry_run:
            print(f"\n(dry run: {len(checks)} check(s) selected, none run)")
        return EXIT_OK
    missing = cuda_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    results = list(run_all(checks))
    print(render_text(results))
    if options.out:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(render_markdown(results, environment()))
        print(f"report: {options.out}")
    return exit_code(results)


def run_all(checks: Sequence[Check]) -> Iterator[Result]:
    for check in checks:
        print(f"  {check.name} ...", file=sys.stderr, flush=True)
        yield run_check(check)


if __name__ == "__main__":
    raise SystemExit(main())
