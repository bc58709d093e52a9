"""The launchers by name (`launcher=`, a typed choice in `config.schema`), and the checks of
`launcher` / `nodes` before anything is read. A new launcher is one module (or small package)
of this package, beside `local`, `slurm` and `ray`, and one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import LauncherKind
from recipe_engine.launchers.local import Local
from recipe_engine.launchers.ray import Ray
from recipe_engine.launchers.slurm import Slurm

DISTRIBUTED = ("ddp", "fsdp", "deepspeed")


def launchers() -> dict[str, LauncherKind]:
    return {kind.name: kind for kind in (Local(), Slurm(), Ray())}


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
