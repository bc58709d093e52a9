"""`plan`: what each stage would load, read, train and where, without loading weights."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compose import compose_config
from recipe_engine.plan.planner import plan_from_config
from recipe_engine.plan.render import render_plan


def main(args: list[str], multirun: bool) -> int:
    overrides, flags = split_hydra_flags(args)
    cfg = compose_config(overrides, extra_dirs=config_dirs(flags))
    print(render_plan(plan_from_config(cfg)))
    return 0
