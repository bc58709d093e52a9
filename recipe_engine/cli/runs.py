"""`runs`: list runs and store entries; `runs rm RUN_DIR`; `runs gc`."""

from __future__ import annotations

import functools
from pathlib import Path

from omegaconf import DictConfig

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compose import compose_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.launchers.records import load_jobs, submitted_runs
from recipe_engine.launchers.registry import launcher_kind, submitting, submitting_keys
from recipe_engine.report.jobs import render_job_states
from recipe_engine.run.machine import remembered_platform
from recipe_engine.store.collect import collect_garbage
from recipe_engine.store.gc import (
    ACTIONS,
    DRY_RUN,
    USAGE,
    PlatformHere,
    remove_run,
    render_listing,
)
from recipe_engine.store.records import Platform


def main(args: list[str], multirun: bool) -> int:
    """Entry point of `python -m recipe_engine runs ...` (see the module docstring)."""
    overrides, flags = split_hydra_flags(args)
    # Positional words (the action and its path) are not Hydra overrides: no `=` in them.
    words = [o for o in overrides if "=" not in o]
    overrides = [o for o in overrides if "=" in o]
    dry_run = DRY_RUN in flags
    action = words.pop(0) if words else "list"
    if action not in ACTIONS:
        raise RecipeError(
            f"Unknown `runs` action `{action}`.{did_you_mean(action, ACTIONS)}\n{USAGE}"
        )
    cfg = compose_config(overrides, extra_dirs=config_dirs(flags))
    root = output_root(cfg)
    if action == "rm":
        if len(words) != 1:
            raise RecipeError(f"`runs rm` takes one run folder, got {len(words)}.\n{USAGE}")
        print(remove_run(root, words[0], dry_run=dry_run))
    elif action == "jobs":
        print(_jobs(root, words))
    elif words:
        raise RecipeError(f"`runs {action}` takes no path (got `{' '.join(words)}`).")
    elif action == "gc":
        print(collect_garbage(root, dry_run=dry_run))
    else:
        print(render_listing(root, here=platform_here_for(cfg)))
    return 0


def _jobs(root: Path, words: list[str]) -> str:
    """A submitted run's jobs with their states, asked of the launcher that submitted them
    (the newest such run without a folder)."""
    if len(words) > 1:
        raise RecipeError(f"`runs jobs` takes at most one run folder, got {len(words)}.\n{USAGE}")
    if words:
        run_dir = Path(words[0]) if Path(words[0]).is_absolute() else root / words[0]
        run_dir = run_dir if run_dir.exists() else Path(words[0]).resolve()
    else:
        submitted = submitted_runs(root)
        if not submitted:
            raise RecipeError(f"No run under {root} was submitted with {submitting_keys()}.")
        run_dir = submitted[-1]
    jobs = load_jobs(run_dir)
    kind = launcher_kind(jobs[0].launcher if jobs else submitting()[0])
    states = kind.job_states(run_dir, jobs)
    return render_job_states(run_dir, jobs, states, kind.down_nodes())


def platform_here_for(cfg: DictConfig) -> PlatformHere:
    """This machine's platform per device, as a run with `cfg` would train; measured on
    first use only, so a store without recorded platforms never waits for torch."""

    @functools.cache
    def here(device: str) -> Platform | None:
        return remembered_platform(device, deterministic=bool(cfg.deterministic))

    return here


def output_root(cfg: DictConfig | EngineConfig) -> Path:
    """The composed `output_root` (so user config folders and defaults apply), absolute."""
    root = Path(str(cfg.output_root))
    root = root.expanduser().resolve()
    if not root.is_dir():
        raise RecipeError(
            f"No output folder `{root}`: nothing has run there yet. "
            "Pass the one your runs used: runs output_root=DIR.",
            key="output_root",
        )
    return root
