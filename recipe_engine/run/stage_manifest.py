"""What a stage's manifest says about where it stands: its place in the recipe and graph,
the weights it changed, the platform and libraries it ran on. Both stage kinds record them
(`run/stage.py`, `run/evaluation_stage.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.run.machine import recorded_platform
from recipe_engine.store.records import Platform


@dataclass(frozen=True)
class StageIdentity:
    """The manifest fields that place a stage output in its recipe and graph."""

    stage: str
    recipe: str
    fingerprint: str
    parent: str | None
    parent_fingerprint: str | None


def stage_identity(plan: RecipePlan, stage: StagePlan) -> StageIdentity:
    parent = plan.parent_of(stage)
    return StageIdentity(
        stage=stage.name,
        recipe=plan.recipe,
        fingerprint=stage.fingerprint,
        parent=stage.parent,
        parent_fingerprint=parent.fingerprint if parent else None,
    )


def trained_parameter_names(model: Any) -> list[str]:
    """Names, in the base model's naming, of the weights this stage changed."""
    names = set()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        name = name.removeprefix("base_model.model.")
        if ".lora_" in name:  # merged into the base weight of the same module
            names.add(f"{name.split('.lora_')[0]}.weight")
            continue
        names.add(name.replace(".modules_to_save.default", ""))
    return sorted(names)


def stage_platform(stage: StagePlan) -> Platform:
    """The platform the stage ran on: this process's, which is rank 0's in a distributed run
    (only rank 0 writes the manifest)."""
    deterministic = stage.determinism.deterministic_kernels
    return recorded_platform(stage.placement.device, deterministic=deterministic)


def manifest_versions(platform: Platform) -> dict[str, str | None]:
    """The manifest's `versions` (older than `platform`, which holds them too)."""
    return {**platform.libraries, "python": platform.python}
