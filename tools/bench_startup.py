"""Where a first command's seconds go before the first step and after the last
(`make bench-startup`; docs/performance.md, "Start-up", holds what it printed).

Every measurement is a fresh process, so imports count as a user pays them:
- imports: the interpreter, the engine's own modules, and the libraries a plan or a training
  process imports (torch, transformers, datasets, PEFT, TRL), each alone;
- `plan` from an empty resolve cache (the tiny models and data present, everything the engine
  remembers about them gone), then again warm; and the cold plan's phases, timed inside one
  process: compose, the recipe's checks, each kind of read (model inventory, model files,
  rows, lengths), the plan, and the wait for the libraries' verdict;
- a first `run` of `text-lora` on a model folder and a data file the engine has never seen,
  against a plain TRL script training the same stage (the same model, rows and SFTConfig /
  LoraConfig arguments): process wall and CPU time, `train_runtime`, and what each spends
  around training.
Wall times on a shared machine move with its load; CPU times (the process and its children)
move less, so both are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.files import JsonObject, default_cache_dir
from recipe_engine.tables import text_table

# The libraries' imports, each in a process of its own: what any training script pays.
IMPORTS = {
    "python (nothing imported)": "pass",
    "the engine's command line": "import recipe_engine.cli.main",
    "torch": "import torch",
    "transformers (+ torch)": "import transformers, transformers.modeling_utils",
    "datasets": "import datasets",
    "peft (+ transformers)": "import peft",
    "trl SFTConfig, SFTTrainer": "from trl import SFTConfig, SFTTrainer",
}
QUIET = ("eval.enabled=false", "eval.compare=false")
# What the engine keeps under its cache that a cold start still has: built models and data.
KEPT = ("data", "models/tiny-*", "models/gguf")


@dataclass(frozen=True)
class Timing:
    """One process (or phase): wall seconds, and CPU seconds of it and its children."""

    name: str
    wall_s: float
    cpu_s: float
    note: str = ""

    def row(self) -> list[str]:
        return [self.name, f"{self.wall_s:.2f}", f"{self.cpu_s:.2f}", self.note]


def table(timings: list[Timing]) -> str:
    return "\n".join(text_table([t.row() for t in timings], header=["", "wall s", "CPU s", ""]))


@dataclass(frozen=True)
class Process:
    """A finished process: its timing and what it printed."""

    timing: Timing
    stdout: str


def timed_process(name: str, command: list[str], env: Mapping[str, str]) -> Process:
    """Run `command` to its end; a failure stops the benchmark with its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=dict(env))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{name}: `{' '.join(command[:5])} ...` failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Process(Timing(name, wall, cpu), done.stdout)


def cold_cache(folder: Path, source: Path | None = None) -> Path:
    """A cache folder holding only what a user's cache keeps between installs of the same
    models and data (the built tiny models, converted GGUF files, built datasets), linked
    from `source`: no record of what was read from them."""
    source = source or default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for pattern in KEPT:
        for path in sorted(source.glob(pattern)):
            target = folder / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    return folder


def engine_env(cache: Path) -> dict[str, str]:
    return {**os.environ, "RECIPE_ENGINE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}


def import_timings() -> list[Timing]:
    python = sys.executable
    return [
        timed_process(name, [python, "-c", code], os.environ).timing
        for name, code in IMPORTS.items()
    ]


def plan_timings(root: Path, recipe: str) -> list[Timing]:
    """`plan` from an empty resolve cache, then again with what it remembered."""
    env = engine_env(cold_cache(root / "plan-cache"))
    command = [sys.executable, "-m", "recipe_engine", "plan", f"recipe={recipe}"]
    cold = timed_process(f"plan {recipe}, cold cache", command, env).timing
    warm = timed_process(f"plan {recipe}, warm", command, env).timing
    return [cold, warm]


def phase_timings(root: Path, recipe: str) -> list[Timing]:
    """The cold plan's phases, timed inside one fresh process (`--phases`)."""
    env = engine_env(cold_cache(root / "phases-cache"))
    command = [sys.executable, "-m", "tools.bench_startup", "--phases", recipe]
    printed = timed_process("phases", command, env).stdout
    return [Timing(**t) for t in json.loads(printed.strip().splitlines()[-1])]


@dataclass
class Stopwatch:
    """Phases timed in this process, in the order they ran."""

    timings: list[Timing] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str, note: str = "") -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            done = Timing(name, time.perf_counter() - wall, time.process_time() - cpu, note)
            self.timings.append(done)


def timed_reads(watch: Stopwatch) -> None:
    """Each record the resolve cache has to read (a miss) timed as a phase of its kind."""
    from recipe_engine.resolve import cache

    remembered = cache.remembered

    def timed(kind, inputs, read):  # noqa: ANN001, ANN202 (the cache's own signature)
        def read_timed() -> JsonObject | None:
            with watch.phase(f"  read: {kind}"):
                return read()

        return remembered(kind, inputs, read_timed)

    cache.remembered = timed


def plan_phases(recipe: str) -> list[Timing]:
    """`plan_from_config`'s steps, one by one, each timed (run with a cold cache)."""
    watch = Stopwatch()
    with watch.phase("import the engine's planning modules"):
        from recipe_engine.config.compose import compose_config, to_engine_config
        from recipe_engine.plan.planner import check_recipe, plan_recipe
        from recipe_engine.resolve.resolver import resolve_recipe
        from recipe_engine.run.preflight import check_with_libraries, judge_at_first_read
    with watch.phase("compose the config (Hydra)"):
        config = to_engine_config(compose_config([f"recipe={recipe}"]))
    with watch.phase("check the recipe (library field tables)"):
        graph = check_recipe(config)
    timed_reads(watch)
    parents = {name: graph.parents[name] for name in graph.order}
    with judge_at_first_read():
        with watch.phase("resolve (the reads below)"):
            inputs = resolve_recipe(config, parents, None)
        with watch.phase("plan"):
            plan = plan_recipe(config, graph, inputs)
        note = "its imports overlap the reads above"
        with watch.phase("preflight: wait for the libraries' child", note):
            check_with_libraries(list(plan.stages.values()))
    return watch.timings


@dataclass(frozen=True)
class NewInputs:
    """A model folder and a data folder the engine has never seen (copies of the built tiny
    ones at new paths): a first run resolves and checks them from scratch."""

    model: Path
    data: Path

    def overrides(self, output_root: Path) -> list[str]:
        return [
            "recipe=text-lora",
            "model.source=local",
            f"model.id={self.model}",
            "model.name=new-model",
            "data.source=local",
            f"data.path={self.data}",
            "data.name=new-data",
            *QUIET,
            f"output_root={output_root}",
        ]


def new_inputs(root: Path) -> NewInputs:
    from recipe_engine.resolve.tiny import build_dataset, build_tiny_model

    model, data = root / "new-model", root / "new-data"
    shutil.copytree(build_tiny_model("tiny-qwen2"), model)
    shutil.copytree(build_dataset("arithmetic"), data)
    return NewInputs(model, data)


def first_run_timings(root: Path) -> list[Timing]:
    """The engine's first and second `run` of text-lora on new inputs, and a plain TRL script
    training the same stage; each row notes what it spent around training."""
    from tools.bench_trl import TrainingLog, stage_log

    inputs = new_inputs(root)
    env = engine_env(cold_cache(root / "run-cache"))
    runs = []
    for name, output_root in (("first", root / "first"), ("second", root / "second")):
        command = [sys.executable, "-m", "recipe_engine", *inputs.overrides(output_root)]
        process = timed_process(f"engine: {name} run of text-lora", command, env)
        runs.append((process.timing, stage_log(output_root, "llm")))
    job = json.dumps(plain_trl_job(inputs, root / "plain", env))
    plain = timed_process("plain TRL, same stage", [sys.executable, "-c", PLAIN_TRL, job], env)
    runs.append((plain.timing, TrainingLog(**json.loads(plain.stdout.strip().splitlines()[-1]))))
    return [
        Timing(
            t.name,
            t.wall_s,
            t.cpu_s,
            f"train_runtime {log.train_runtime:.1f} s, "
            f"around training {t.wall_s - log.train_runtime:.1f} s ({log.steps} steps)",
        )
        for t, log in runs
    ]


def plain_trl_job(inputs: NewInputs, output_dir: Path, env: Mapping[str, str]) -> JsonObject:
    """The plain script's arguments, from the engine's plan of the same stage (planned in a
    child with the run's cache, which the runs above have warmed)."""
    code = (
        "import json, sys; from recipe_engine.config.compose import compose_config; "
        "from recipe_engine.run.planning import plan_from_config; "
        "stage = plan_from_config(compose_config(sys.argv[1:])).stages['llm']; "
        "print(json.dumps({'dtype': stage.dtype, 'lora': stage.policy.lora.config, "
        "'trainer': stage.trainer}))"
    )
    command = [sys.executable, "-c", code, *inputs.overrides(output_dir)]
    planned = json.loads(timed_process("plan", command, env).stdout.strip().splitlines()[-1])
    saving = ("save_strategy", "save_steps", "save_total_limit")
    trainer = {k: v for k, v in planned["trainer"].items() if k not in saving}
    return {
        "model": str(inputs.model),
        "train": str(inputs.data / "train.jsonl"),
        "dtype": planned["dtype"],
        "lora": planned["lora"],
        "trainer": {**trainer, "save_strategy": "no", "output_dir": str(output_dir)},
    }


# The plain script, run as `python -c` so that it imports nothing of the engine.
PLAIN_TRL = """
import json, sys
import datasets, torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

job = json.loads(sys.argv[1])
rows = datasets.load_dataset("json", data_files=job["train"], split="train")
model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=getattr(torch, job["dtype"]))
trainer = SFTTrainer(
    model=model, args=SFTConfig(**job["trainer"]), train_dataset=rows,
    processing_class=AutoTokenizer.from_pretrained(job["model"]),
    peft_config=LoraConfig(**job["lora"]),
)
result = trainer.train()
print(json.dumps({"steps": result.global_step, "train_runtime": result.metrics["train_runtime"]}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_startup")
    parser.add_argument("--recipe", default="r3-two-stage", help="the recipe `plan` plans")
    parser.add_argument("--parts", default="imports,plan,phases,run", help="what to measure")
    parser.add_argument("--phases", metavar="RECIPE", help=argparse.SUPPRESS)  # the child's
    options = parser.parse_args(argv)
    if options.phases:
        print(json.dumps([t.__dict__ for t in plan_phases(options.phases)]))
        return
    parts = options.parts.split(",")
    measures = {
        "imports": ("imports, each in a fresh process", lambda root: import_timings()),
        "plan": ("`plan` from an empty resolve cache", lambda r: plan_timings(r, options.recipe)),
        "phases": (
            f"the cold `plan {options.recipe}`, phase by phase",
            lambda root: phase_timings(root, options.recipe),
        ),
        "run": ("a first run on a new model and data file", first_run_timings),
    }
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        for part in parts:
            title, measure = measures[part]
            print(f"\n{title}:\n{table(measure(Path(scratch) / part))}", flush=True)


if __name__ == "__main__":
    main()
