"""`ui`: a read-only local web view of the runs under output_root (`recipe_engine.ui`)."""

from __future__ import annotations

import sys

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.cli.runs import output_root
from recipe_engine.config.ui_options import DEFAULT_HOST, DEFAULT_PORT, compose_ui
from recipe_engine.errors import RecipeError
from recipe_engine.ui.server import ServeSettings, bind_warning, serve

USAGE = f"""\
usage: recipe-engine ui [output_root=DIR] [ui.host=ADDRESS] [ui.port=PORT]

Serve a read-only web view of what the engine wrote under output_root: the runs (recipe,
start, state, stages trained and reused, final score), each run's stage graph with every
stage's state, key, lineage, plan, memory, curves and export cards (updating by itself while
the run trains), the comparisons, experiments and sweeps, and the store (entries, sizes, the
runs using each, what `runs gc` would free). Nothing it serves writes, deletes or starts
anything, and it serves nothing but the engine's records.

  ui.host=ADDRESS  the address to listen on (default {DEFAULT_HOST}: this machine only; any
                   other prints a warning). On a cluster's login node keep the default and
                   tunnel: ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} LOGIN_NODE
  ui.port=PORT     the port (default {DEFAULT_PORT})
"""


def main(args: list[str], multirun: bool) -> int:
    """The `ui` verb: serve until interrupted (Ctrl-C)."""
    if multirun:
        raise RecipeError("`ui` takes no sweep: drop -m/--multirun.")
    overrides, flags = split_hydra_flags(args)
    config = compose_ui(overrides, config_dirs(flags))
    settings = ServeSettings(output_root(config), config.ui.host, config.ui.port)
    warning = bind_warning(settings.host)
    if warning:
        print(warning, file=sys.stderr)
    serve(settings)
    return 0
