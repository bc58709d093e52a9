"""`python -m recipe_engine [VERB] [Hydra overrides]`: argv normalisation and verb dispatch.

Every verb composes the recipe with Hydra first; `run` then hands the same overrides to
Hydra's own entry point so run folders, multirun sweeps and launchers behave as Hydra users
expect. User errors print one message and exit with code 2, never a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence

from recipe_engine.errors import EXIT_USER_ERROR, RecipeError

VERBS: dict[str, str] = {
    "run": "train the recipe's stages (default verb)",
    "plan": "show what each stage would load, train and where, without loading weights",
    "doctor": "print what placement depends on here: libraries, devices, launcher, bitsandbytes",
    "inspect": "per-component parameters, dtypes, devices, trainable share, quantization, LoRA",
    "diff": "the resolved settings that differ between two recipes, stage by stage",
    "compare": "base vs every stage on the held-out probes: CSV, JSONL, report, plots",
    "runs": "list runs and store entries; `runs rm RUN_DIR`, `runs gc` free disk",
}
# Verbs implemented outside this module: "module:function", imported only when used.
EXTERNAL_VERBS = {
    "doctor": "recipe_engine.doctor:run_doctor",
    "inspect": "recipe_engine.inspection:run_inspect",
    "diff": "recipe_engine.recipe_diff:run_diff",
    "compare": "recipe_engine.compare:run_compare",
    "runs": "recipe_engine.housekeeping:run_runs",
}
MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra flags that take a value in the next argument.
FLAGS_WITH_VALUE = ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp")

# Library settings are open mappings validated against SFTConfig / LoraConfig /
# BitsAndBytesConfig, so any of their keys may be set without Hydra's `+` (add-or-override).
_LIBRARY_KEY = re.compile(r"^(stage\.[\w\-]+\.(train|lora|quantization)\.\w+=)")
# gpus=6,7 is ambiguous to Hydra (a sweep or a list?); outside multirun it means a list.
_BARE_LIST = re.compile(r"^(gpus|only|force)=([^\[\]{}()'\"]+,[^\[\]{}()'\"]+)$")


def normalise_argv(argv: Sequence[str]) -> tuple[str, list[str], bool]:
    """(verb, Hydra arguments, multirun) from the raw command line."""
    args = list(argv)
    verb = "run"
    if args and not args[0].startswith("-") and "=" not in args[0]:
        verb = args.pop(0)
        if verb not in VERBS:
            from recipe_engine.errors import did_you_mean

            raise RecipeError(
                f"Unknown verb `{verb}`.{did_you_mean(verb, VERBS)} "
                f"Verbs: {', '.join(VERBS)}. See `python -m recipe_engine --help`."
            )
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if not multirun:
        args = [_BARE_LIST.sub(r"\1=[\2]", a) for a in args]
    args = [_LIBRARY_KEY.sub(r"++\1", a) for a in args]
    return verb, args, multirun


def split_hydra_flags(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(overrides, flags) where flags are Hydra's own options such as --config-dir DIR."""
    overrides: list[str] = []
    flags: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in FLAGS_WITH_VALUE:
            flags += [arg, next(it, "")]
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            overrides.append(arg)
    return overrides, flags


def config_dirs(flags: Sequence[str]) -> list[str]:
    dirs = []
    for i, flag in enumerate(flags):
        if flag in ("--config-dir", "-cd") and i + 1 < len(flags):
            dirs.append(flags[i + 1])
        elif flag.startswith("--config-dir="):
            dirs.append(flag.split("=", 1)[1])
    return dirs


def usage() -> str:
    from recipe_engine.config import available

    lines = [
        "usage: python -m recipe_engine [VERB] [key=value ...] [-m] [--config-dir DIR]",
        "",
        "verbs:",
        *(f"  {verb:<8} {text}" for verb, text in VERBS.items()),
        "",
        f"recipes:  {', '.join(available('recipe'))}",
        f"models:   {', '.join(available('model'))}",
        f"data:     {', '.join(available('data'))}",
        f"hardware: {', '.join(available('hardware'))} (profiles describe GPUs for `plan`)",
        "",
        "key options (Hydra override syntax):",
        "  recipe=NAME            which recipe (default r3-two-stage)",
        "  model=NAME / data=NAME base model and dataset entries",
        "  gpus=6,7               physical GPU ids; sets CUDA_VISIBLE_DEVICES before CUDA starts",
        "  device=auto|cpu|cuda|mps   an explicit device always wins over detection",
        "  parallel=auto|single|model_parallel|ddp|fsdp|deepspeed",
        "  stage.NAME.train.KEY=V any SFTConfig field, e.g. stage.llm.train.learning_rate=1e-4",
        "  only=[NAME] force=[NAME] fresh=true   rerun / retrain / ignore checkpoints",
        "  -m KEY=A,B             Hydra multirun sweep; --config-dir DIR adds your own recipes",
        "",
        "examples:",
        "  python -m recipe_engine recipe=r3-two-stage gpus=6,7",
        "  python -m recipe_engine plan recipe=r3-two-stage gpus=6,7 hardware=2x-rtx6000-ada",
        "  python -m recipe_engine -m recipe=r1-llm-only stage.llm.train.learning_rate=1e-4,2e-4",
    ]
    return "\n".join(lines)


def verb_usage(verb: str) -> str:
    """A verb's own usage text (its module's USAGE), else the general one."""
    import importlib

    module = importlib.import_module(EXTERNAL_VERBS[verb].split(":")[0])
    return getattr(module, "USAGE", None) or usage()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(verb_usage(argv[0]) if argv and argv[0] in EXTERNAL_VERBS else usage())
        return 0
    try:
        verb, args, multirun = normalise_argv(argv)
        return handler(verb)(args, multirun)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR


def run_plan(args: list[str], multirun: bool) -> int:
    from recipe_engine.config import compose_config
    from recipe_engine.planning import plan_from_config, render_plan

    overrides, flags = split_hydra_flags(args)
    cfg = compose_config(overrides, extra_dirs=config_dirs(flags))
    print(render_plan(plan_from_config(cfg)))
    return 0


def run_run(args: list[str], multirun: bool) -> int:
    from recipe_engine.config import compose_config
    from recipe_engine.planning import plan_from_config

    overrides, flags = split_hydra_flags(args)
    # Validate every job before Hydra creates a run folder: a bad recipe writes nothing.
    jobs = expand_sweep(overrides) if multirun else [overrides]
    from recipe_engine.runner import remember

    plans = [
        remember(plan_from_config(compose_config(j, extra_dirs=config_dirs(flags)))) for j in jobs
    ]
    check_data(plans)
    if not multirun:
        visible = plans[0].cuda_visible_devices
        if visible is not None:  # before anything initialises CUDA
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        placement = next(iter(plans[0].stages.values())).placement
        if placement.launcher == "self-torchrun":
            return relaunch(args, placement.nproc, plans[0])
    if int(os.environ.get("RANK", "0")) > 0:
        args = [*args, "hydra.output_subdir=null"]  # rank 0 writes the run folder's config
    from recipe_engine.runner import hydra_entry

    sys.argv = [sys.argv[0], *args]
    hydra_entry()
    return 0


def relaunch(args: list[str], nproc: int, plan) -> int:
    """Run this same command as `nproc` processes through torch.distributed.run (torchrun).

    Every rank gets the same overrides and one shared run folder, so all ranks run the same
    stages; rank 0 writes manifests and the summary. For several machines, call torchrun
    yourself with --nnodes/--node_rank/--rdzv_endpoint and `-m recipe_engine ...`.
    """
    import time

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = f"{plan.config['output_root']}/runs/{plan.recipe}/{stamp}"
    command = [
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "recipe_engine",
        *args,
        f"hydra.run.dir={run_dir}",
    ]
    print(f"launching {nproc} processes: torchrun {' '.join(command)}", file=sys.stderr)
    try:
        torchrun(command)
    except ChildFailedError as error:
        codes = {failure.exitcode for failure in error.failures.values()}
        return EXIT_USER_ERROR if codes == {EXIT_USER_ERROR} else 1
    return 0


def check_data(plans: Sequence) -> None:
    """Read and check the data of every stage that will train, so a bad row stops the run
    before it starts (and `only` names a stage whose parent is stored)."""
    from recipe_engine.data import load_splits
    from recipe_engine.runner import will_train
    from recipe_engine.store import Store

    seen = set()
    for plan in plans:
        for name in will_train(plan, Store(plan.config["output_root"])):
            stage = plan.stages[name]
            key = repr((stage.data, stage.model["kind"]))
            if key not in seen:
                seen.add(key)
                load_splits(stage.data, kind=stage.model["kind"], seed=plan.config["seed"])


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """One override list per multirun job, expanded by Hydra's own sweep parser."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from recipe_engine.config import translate_error

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as error:  # Hydra's grammar errors carry the offending override
        raise translate_error(error) from None
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


VERB_HANDLERS: dict[str, Callable[[list[str], bool], int]] = {"run": run_run, "plan": run_plan}


def handler(verb: str) -> Callable[[list[str], bool], int]:
    if verb in VERB_HANDLERS:
        return VERB_HANDLERS[verb]
    import importlib

    module, function = EXTERNAL_VERBS[verb].split(":")
    return getattr(importlib.import_module(module), function)


if __name__ == "__main__":
    sys.exit(main())
