"""`doctor`: what placement depends on here (libraries, GPUs, launcher, bitsandbytes)."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.errors import RecipeError
from recipe_engine.report.doctor import doctor_report

USAGE = """\
usage: recipe-engine doctor [key=value ...]

Print what placement depends on here: library versions, the GPUs this process sees
(CUDA_VISIBLE_DEVICES, nvidia-smi), the launcher (torchrun / accelerate variables), whether
bitsandbytes can quantize on this device, and what `plan` would decide for the recipe given
(recipe=NAME gpus=... device=...). Problems come with their fixes; exit code 0.
"""


def main(args: list[str], multirun: bool) -> int:
    """The `doctor` verb: print the report; exit 0 (problems are in the text, with fixes)."""
    if multirun:
        raise RecipeError("`doctor` takes no sweep: drop -m/--multirun.")
    overrides, flags = split_hydra_flags(args)
    print(doctor_report(overrides, extra_dirs=config_dirs(flags)))
    return 0
