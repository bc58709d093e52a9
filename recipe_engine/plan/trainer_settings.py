"""A stage's `SFTConfig` arguments: the recipe's `train` keys plus what the engine owns.

Decided in the plan (run only adds `output_dir`, the store's folder for the stage), so the
trainer that runs is the trainer `plan` printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.placement import PlacementPlan

# ZeRO-2 with the batch settings taken from the Trainer ("auto"); a user's own config file
# goes in stage.<name>.train.deepspeed.
DEFAULT_DEEPSPEED = {
    "zero_optimization": {"stage": 2},
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
}


def trainer_settings(
    stage: StageConfig, placement: PlacementPlan, seed: int, kind: str, has_eval: bool
) -> dict[str, Any]:
    """`SFTConfig(**settings, output_dir=...)` for this stage."""
    train = stage.train
    accelerated = placement.device != "cpu"
    settings: dict[str, Any] = {
        "report_to": "none",
        "save_strategy": "steps",
        "logging_first_step": True,
        "per_device_eval_batch_size": train.get("per_device_train_batch_size", 8),
        "eval_strategy": "no",  # the engine evaluates once at the end of the stage
        "ddp_find_unused_parameters": False,  # frozen parts have no grads by design
        **train,
        "seed": seed,
        "data_seed": seed,
        "use_cpu": placement.use_cpu,
        "gradient_checkpointing": stage.gradient_checkpointing,
        "bf16": stage.dtype == "bfloat16" and accelerated,
        "fp16": stage.dtype == "float16" and accelerated,
    }
    if placement.mode == "fsdp":
        # Shard parameters, gradients and optimizer state; wrap each decoder layer.
        settings.setdefault("fsdp", "full_shard auto_wrap")
    if placement.mode == "deepspeed":
        settings.setdefault("deepspeed", DEFAULT_DEEPSPEED)
    if kind == "vlm":
        # Truncating a VLM row can cut image tokens out from under their features.
        settings.setdefault("max_length", None)
        settings.setdefault("remove_unused_columns", False)
    if has_eval and settings.get("eval_strategy") not in (None, "no"):
        settings.setdefault("eval_steps", settings.get("save_steps"))
    return settings


def zero_stage(name: str, train: dict[str, Any]) -> int | None:
    """The DeepSpeed ZeRO stage a stage trains with: its own config's (a mapping or a JSON
    file in `train.deepspeed`), else the engine's default ZeRO-2."""
    config = train.get("deepspeed") or DEFAULT_DEEPSPEED
    if isinstance(config, str):
        path = Path(config).expanduser()
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise RecipeError(
                f"`stage.{name}.train.deepspeed` is {config}, which is not a readable DeepSpeed "
                f"JSON config ({error}). Point it at one, or drop it for the default ZeRO-2.",
                key=f"stage.{name}.train.deepspeed",
            ) from None
    stage = (config.get("zero_optimization") or {}).get("stage")
    return stage if isinstance(stage, int) else None
