"""`inspect PATH_OR_MODEL [PATH_OR_MODEL]`: per-component parameters, dtypes, devices."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.errors import RecipeError
from recipe_engine.report.inspection import (
    USAGE,  # noqa: F401  (`--help` shows it)
    parse_args,
    render,
    render_pair,
    resolve_target,
)
from recipe_engine.run.inspecting import inspect_target


def main(args: list[str], multirun: bool) -> int:
    """The `inspect` verb."""
    if multirun:
        raise RecipeError("`inspect` takes no sweep: drop -m/--multirun.")
    words, flags = split_hydra_flags(args)
    targets, options = parse_args(words)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor loading bars would bury the report
    extra = config_dirs(flags)
    results = [
        inspect_target(resolve_target(t, extra_dirs=extra), options[i])
        for i, t in enumerate(targets)
    ]
    print(render(results[0]) if len(results) == 1 else render_pair(results[0], results[1]))
    return 0
