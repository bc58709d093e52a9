"""`plan`: what each stage would load, read, train and where, without loading weights."""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compose import compose_config
from recipe_engine.plan.render import render_plan
from recipe_engine.run.planning import plan_from_config

USAGE = """\
usage: recipe-engine plan [key=value ...] [--config-dir DIR]

Show what each stage of the recipe would load, read, train and where, without loading
weights: init source, data (format, rows), frozen / trained / LoRA / quantized components,
dtype, placement (device, mode, device_map, n_gpu), the SFTConfig it trains with, and its key.
Everything a run would refuse is refused here, with one message and exit code 2.

options (Hydra override syntax, as for run):
  recipe=NAME model=NAME data=NAME   which recipe, base model and data
  hardware=PROFILE                   plan for another machine (e.g. hardware=8x-a100-80gb)
  gpus=6,7 device=cuda parallel=ddp  placement, as run would do it
  stage.NAME.train.KEY=V             any SFTConfig field

examples:
  python -m recipe_engine plan recipe=r3-two-stage gpus=6,7 hardware=2x-rtx6000-ada
  python -m recipe_engine plan recipe=text-lora data.source=local data.path=my.jsonl
"""


def main(args: list[str], multirun: bool) -> int:
    overrides, flags = split_hydra_flags(args)
    cfg = compose_config(overrides, extra_dirs=config_dirs(flags))
    print(render_plan(plan_from_config(cfg)))
    return 0
