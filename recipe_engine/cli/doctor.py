"""`doctor`: what placement depends on here (libraries, GPUs, launcher, bitsandbytes)."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.errors import RecipeError
from recipe_engine.report.doctor import doctor_report
from recipe_engine.report.known_failures import read_log

USAGE = """\
usage: recipe-engine doctor [key=value ...]

Print what placement depends on here: library versions, the GPUs this process sees
(CUDA_VISIBLE_DEVICES, nvidia-smi), the launcher (torchrun / accelerate variables), whether
bitsandbytes can quantize on this device, and what `plan` would decide for the recipe given
(recipe=NAME gpus=... device=...). Problems come with their fixes; exit code 0.

  log=FILE   the log or traceback of a failed run (yours, with or without the engine):
             the known placement failures in it, named with their cause and fix
"""


def main(args: list[str], multirun: bool) -> int:
    """The `doctor` verb: print the report; exit 0 (problems are in the text, with fixes)."""
    if multirun:
        raise RecipeError("`doctor` takes no sweep: drop -m/--multirun.")
    overrides, flags = split_hydra_flags(args)
    logs = [o.split("=", 1)[1] for o in overrides if o.startswith("log=")]
    overrides = [o for o in overrides if not o.startswith("log=")]  # doctor's own key
    log = read_log(logs[-1]) if logs else None
    print(doctor_report(overrides, extra_dirs=config_dirs(flags), log=log))
    return 0
