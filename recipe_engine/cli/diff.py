"""`diff RECIPE_A RECIPE_B`: the resolved settings that differ, stage by stage."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.errors import RecipeError
from recipe_engine.report.diff import USAGE, diff_recipes, render_diff  # noqa: F401 (USAGE: `--help`)


def main(args: list[str], multirun: bool) -> int:
    """The `diff` verb."""
    if multirun:
        raise RecipeError("`diff` takes no sweep: drop -m/--multirun.")
    words, flags = split_hydra_flags(args)
    show_all = "--all" in flags
    names = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    if len(names) != 2:
        raise RecipeError(f"`diff` compares two recipes, got {len(names)}.\n{USAGE}")
    result = diff_recipes(names[0], names[1], overrides, extra_dirs=config_dirs(flags))
    print(render_diff(result, show_all=show_all))
    return 0
