"""`python -m recipe_engine [VERB] [Hydra overrides]`: verb dispatch.

Each verb is one module of this package (`cli/<verb>.py`) with a `main(args, multirun)`,
imported only when used. User errors print one message and exit with code 2, never a
traceback.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from recipe_engine.cli.argv import VERBS, normalise_argv
from recipe_engine.errors import EXIT_USER_ERROR, RecipeError

# The module that implements each verb (`inspect` would shadow the standard library's name).
VERB_MODULES = {verb: f"recipe_engine.cli.{verb}" for verb in VERBS} | {
    "inspect": "recipe_engine.cli.inspect_verb"
}


def verb_module(verb: str) -> ModuleType:
    return importlib.import_module(VERB_MODULES[verb])


def handler(verb: str) -> Callable[[list[str], bool], int]:
    return verb_module(verb).main


def usage() -> str:
    from recipe_engine.config.compose import available

    lines = [
        "usage: recipe-engine [VERB] [key=value ...] [-m] [--config-dir DIR]",
        "       (or python -m recipe_engine ...: the same command)",
        "",
        "verbs:",
        *(f"  {verb:<8} {text}" for verb, text in VERBS.items()),
        "",
        f"recipes:  {', '.join(available('recipe'))}",
        f"models:   {', '.join(available('model'))}",
        f"data:     {', '.join(available('data'))}",
        f"hardware: {', '.join(available('hardware'))} (profiles describe GPUs for `plan`)",
        *_plugins_line(),
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
        "  python -m recipe_engine compare recipes=[r1-llm-only,r3-two-stage]   # recipe vs recipe",
    ]
    return "\n".join(lines)


def _plugins_line() -> list[str]:
    """The plug-ins installed here, by group (none: no line): docs/plugins.md."""
    from recipe_engine.plugins import listing

    return [f"plug-ins: {listing()}"] if listing() else []


def verb_usage(verb: str) -> str:
    """A verb's own usage text (its module's USAGE), else the general one."""
    return getattr(verb_module(verb), "USAGE", None) or usage()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        verb, args, multirun = normalise_argv(argv)  # an unknown verb is refused, help or not
        if any(a in ("-h", "--help") for a in argv):
            print(verb_usage(verb) if argv and argv[0] in VERBS else usage())
            return 0
        return handler(verb)(args, multirun)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR


def console() -> int:
    """The `recipe-engine` script and `python -m recipe_engine`: `main`, quiet when the reader
    of its output goes away (`recipe-engine runs | head`), and quick to exit."""
    try:
        return main()
    except BrokenPipeError:
        # Python's documented recipe: stdout to devnull, or the exit's flush raises again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        # The interpreter's shutdown collects garbage over everything still alive: after a
        # training command, the imported stack, a million objects, for a process that is
        # ending (measured: a short text-lora run exits in 2.2-2.4 s after its atexit
        # handlers, 0.3-0.4 s frozen; 12.7-14.0 s in all against 11.2-11.4 s). Frozen out of
        # the collector, they are skipped. Nothing is left to that collection: the command has
        # closed what it wrote, and the atexit handlers (logging, temporary folders, MLflow's
        # run) still run.
        gc.freeze()
