"""The command line's grammar: verbs, Hydra's flags, and the rewrites Hydra needs.

`gpus=6,7` is ambiguous to Hydra (a sweep or a list?), so outside multirun it becomes
`gpus=[6,7]`; library keys (`stage.X.train.*`, `.lora.*`, `.quantization.*`) may be set
without Hydra's `+`, so they become `++key=value` (add or override).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from recipe_engine.config.compose import as_add_or_override
from recipe_engine.errors import RecipeError, did_you_mean

VERBS: dict[str, str] = {
    "run": "train the recipe's stages (default verb)",
    "plan": "show what each stage would load, train and where, without loading weights",
    "doctor": "print what placement depends on here: libraries, devices, launcher, bitsandbytes",
    "inspect": "per-component parameters, dtypes, devices, trainable share, quantization, LoRA",
    "diff": "the resolved settings that differ between two recipes, stage by stage",
    "compare": "base vs every stage on the held-out probes; recipes=[A,B]: recipe vs recipe",
    "export": "a stage as a standalone folder (merged or adapter) with its model card; push=true",
    "runs": "list runs and store entries; `runs rm RUN_DIR`, `runs gc` free disk",
    "chat": "talk to a committed stage (streamed answers; prompt=TEXT for one), as compare asks",
    "ui": "the web view: runs, stages, experiments, store; start, stop, compare runs, chat",
}
MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra flags that take a value in the next argument.
FLAGS_WITH_VALUE = (
    "--config-dir",
    "-cd",
    "--config-name",
    "-cn",
    "--config-path",
    "-cp",
    "--cfg",
    "-c",
    "--package",
    "-p",
)
# `--info` takes a value only when one of these follows it.
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
# Hydra flags that print and exit: the app never runs, so nothing is planned first.
PRINT_FLAGS = ("--cfg", "-c", "--info", "-i", "--hydra-help")

# gpus=6,7 is ambiguous to Hydra (a sweep or a list?); outside multirun it means a list (the
# list keys of the engine, and compare's).
_LIST_KEYS = "gpus|only|force|recipes|seeds|tasks"
_BARE_LIST = re.compile(rf"^({_LIST_KEYS})=([^\[\]{{}}()'\"]+,[^\[\]{{}}()'\"]+)$")


def normalise_argv(argv: Sequence[str]) -> tuple[str, list[str], bool]:
    """(verb, Hydra arguments, multirun) from the raw command line."""
    args = list(argv)
    verb = "run"
    if args and not args[0].startswith("-") and "=" not in args[0]:
        verb = args.pop(0)
        if verb not in VERBS:
            raise RecipeError(
                f"Unknown verb `{verb}`.{did_you_mean(verb, VERBS)} "
                f"Verbs: {', '.join(VERBS)}. See `python -m recipe_engine --help`."
            )
    _refuse_repeated_keys(args)
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if not multirun:
        args = [_BARE_LIST.sub(r"\1=[\2]", a) for a in args]
    args = [as_add_or_override(a) for a in args]
    return verb, args, multirun


def _refuse_repeated_keys(args: Sequence[str]) -> None:
    """A key given twice: Hydra would keep the last silently; the user meant one of them."""
    seen: dict[str, str] = {}
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key in seen:
            raise RecipeError(
                f"`{key}` is given twice ({seen[key]} and {arg}); Hydra would silently keep the "
                f"last. Keep one (a sweep over both is -m {key}=A,B).",
                key=key,
            )
        seen[key] = arg


def split_hydra_flags(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(overrides, flags) where flags are Hydra's own options such as --config-dir DIR."""
    overrides: list[str] = []
    flags: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in FLAGS_WITH_VALUE:
            flags += [arg, next(it, "")]
        elif arg in ("--info", "-i"):
            flags.append(arg)
            topic = next(it, None)
            if topic in INFO_TOPICS:
                flags.append(topic)
            elif topic is not None:
                overrides.append(topic)
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


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """One override list per multirun job, in the order Hydra's basic sweeper numbers them:
    Hydra's own override parser, each key's values (a sweep's, or its one value) crossed in
    the order the keys were first given, the last key varying fastest."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from recipe_engine.config.compose import translate_error

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as error:  # Hydra's grammar errors carry the offending override
        raise translate_error(error) from None
    values: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override() and not override.is_discrete_sweep():
            kind = override.value_type.name if override.value_type else "?"  # as Hydra says it
            raise HydraException(f"BasicSweeper does not support sweep type : {kind}")
        if override.is_sweep_override():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*values.values())]


def task_overrides(job: Sequence[str]) -> list[str]:
    """A job's overrides as Hydra's launcher hands them to the job (`hydra.overrides.task`):
    without Hydra's own (`hydra.*`, `hydra/...`), which configure the sweep itself."""
    return [o for o in job if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
