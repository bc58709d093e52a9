"""`ui`: the local web view of the runs under output_root, and the workbench that starts,
stops and compares them and talks to their stages (`recipe_engine.ui`)."""

from __future__ import annotations

import sys
from pathlib import Path

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.cli.runs import output_root
from recipe_engine.config.ui_options import (
    DEFAULT_HOST,
    DEFAULT_MAX_UPLOAD_MB,
    DEFAULT_PORT,
    compose_ui,
)
from recipe_engine.errors import RecipeError
from recipe_engine.ui.server import ServeSettings, bind_warning, serve

USAGE = f"""\
usage: recipe-engine ui [output_root=DIR] [ui.host=ADDRESS] [ui.port=PORT]
                        [ui.max_upload_mb=N] [--config-dir DIR]

Serve a web view of what the engine wrote under output_root: the runs (recipe, start, state,
stages trained and reused, final score), each run's stage graph with every stage's state, key,
lineage, plan, memory, curves and export cards (updating by itself while the run trains), the
comparisons, experiments (runs by recipe and seed) and sweeps, curves of several runs overlaid,
and the store (entries, sizes, the runs using each, what `runs gc` would free).

It is also a workbench: start a run or a comparison (plan first; the engine's own command in a
process of its own, in this folder, writing to output_root), stop it, start it again (it
resumes), rerun a stage, and talk to a committed stage (a `chat` worker; two side by side).
Changing anything needs the token printed with the address at start, from the view's own
pages; overrides that would write outside output_root or run code from outside this folder
are refused with the reason.

  ui.host=ADDRESS  the address to listen on (default {DEFAULT_HOST}: this machine only; any
                   other prints a warning). On a cluster's login node keep the default and
                   tunnel: ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} LOGIN_NODE
  ui.port=PORT     the port (default {DEFAULT_PORT})
  ui.max_upload_mb=N  the largest picture the chat takes (default {DEFAULT_MAX_UPLOAD_MB:g} MiB)
  --config-dir DIR your own recipes and entries, offered to start (as for every verb)
"""


def main(args: list[str], multirun: bool) -> int:
    """The `ui` verb: serve until interrupted (Ctrl-C)."""
    if multirun:
        raise RecipeError("`ui` takes no sweep: drop -m/--multirun.")
    overrides, flags = split_hydra_flags(args)
    dirs = config_dirs(flags)
    config = compose_ui(overrides, dirs)
    settings = ServeSettings(
        output_root(config),
        config.ui.host,
        config.ui.port,
        tuple(str(Path(d).expanduser().resolve()) for d in dirs),
        config.ui.max_upload_mb,
    )
    warning = bind_warning(settings.host)
    if warning:
        print(warning, file=sys.stderr)
    serve(settings)
    return 0
