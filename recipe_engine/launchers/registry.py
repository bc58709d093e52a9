"""The launchers by name (`launcher=`, a typed choice in `config.schema`), and the checks of
`launcher` / `nodes` before anything is read. A new launcher is one module (or small package)
of this package, beside `local`, `slurm` and `ray`, and one line here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import LauncherKind
from recipe_engine.launchers.local import Local
from recipe_engine.launchers.ray import Ray
from recipe_engine.launchers.slurm import Slurm
from recipe_engine.plugins import register

DISTRIBUTED = ("ddp", "fsdp", "deepspeed")


# What a launcher is asked (`kinds.LauncherKind`): a plug-in's must have every one.
METHODS = tuple(n for n, v in vars(LauncherKind).items() if callable(v) and n[0] != "_")
PROTOCOL = ("name", "scheduled", "waits", "node_starter", "command_keys", *METHODS)


def launchers() -> dict[str, LauncherKind]:
    """The engine's launchers, then those of plug-ins (`plugins`)."""
    own = {kind.name: kind for kind in (Local(), Slurm(), Ray())}
    checked = functools.partial(_broken, frozenset(own))
    return {**own, **{plugin.name: plugin.value for plugin in register("launchers", checked)}}


def _broken(own: frozenset[str], kind: Any) -> str | None:
    """What a plug-in's launcher gets wrong of the protocol (None: nothing)."""
    missing = [name for name in PROTOCOL if not hasattr(kind, name)]
    if missing:
        return f"is not a launcher: it lacks {', '.join(missing)} (recipe_engine.launchers.kinds)"
    if kind.name in own:
        return f"is called `{kind.name}`, which is a launcher the engine has: give it another name"
    return None


def launcher_kind(name: str) -> LauncherKind:
    known = launchers()
    if name not in known:
        raise RecipeError(f"`launcher={name}` is not one of: {', '.join(known)}.", key="launcher")
    return known[name]


def submitting() -> list[str]:
    """The launchers that submit a run's stages as jobs (`runs jobs` follows them)."""
    return [name for name, kind in launchers().items() if kind.scheduled]


def submitting_keys() -> str:
    """The `launcher=` values that submit stages as jobs, as a message names them."""
    return " or ".join(f"`launcher={name}`" for name in submitting())


def scheduled_by(hydra_launcher: str) -> bool:
    """Whether a multirun's Hydra launcher (`hydra/launcher=NAME`) hands its jobs to a
    scheduler, which gives each job its GPUs."""
    return any(kind.schedules(hydra_launcher) for kind in launchers().values())


def check_sweep(hydra_launcher: Mapping[str, Any]) -> None:
    """A multirun's Hydra launcher checked by the launcher whose scheduler it submits to,
    before anything is written."""
    for kind in launchers().values():
        kind.check_sweep(hydra_launcher)


def check_launch(cfg: EngineConfig) -> None:
    """What `launcher` / `nodes` and each launcher's keys get wrong alone, before anything is
    read (every launcher's keys: a key given is checked, chosen or not)."""
    launcher_kind(cfg.launcher)
    if cfg.nodes < 1:
        raise RecipeError(f"`nodes={cfg.nodes}`: a stage needs at least one node.", key="nodes")
    if cfg.nodes > 1 and cfg.parallel not in DISTRIBUTED:
        raise RecipeError(
            f"`nodes={cfg.nodes}` trains each stage on {cfg.nodes} nodes with data "
            f"parallelism, but `parallel={cfg.parallel}`. Set `parallel=ddp` (or fsdp, "
            "deepspeed), or drop `nodes`.",
            key="parallel",
        )
    for kind in launchers().values():
        kind.check(cfg)
