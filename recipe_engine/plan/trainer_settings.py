"""A stage's `SFTConfig` arguments: the recipe's `train` keys plus what the engine owns.

Decided in the plan, so the trainer that runs is the trainer `plan` printed. Run adds only
what belongs to one run, not to the stage's weights: `output_dir` (the store's folder for the
stage) and the trackers' defaults (`run.tracking`). The loss flags follow the data
(`choose_loss`): templates set no `assistant_only_loss` / `completion_only_loss`, because only
the resolved row format (and the model's chat template) says which one can apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.config.library_keys import ENGINE_TRAIN_KEYS, library_fields
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.plan.placement import PlacementPlan
from recipe_engine.resolve.row_shapes import LOSS_FLAGS, SHAPES
from recipe_engine.resolve.templates import MARKED, PATCHED, UNMARKED, UNREAD
from recipe_engine.trainers import TRAINERS

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
) -> LibraryKwargs:
    """`SFTConfig(**settings, output_dir=...)` for this stage."""
    train = stage.train
    accelerated = placement.device != "cpu"
    settings: LibraryKwargs = {
        "report_to": "none",
        "save_strategy": "steps",
        "logging_first_step": True,
        "per_device_eval_batch_size": train.get("per_device_train_batch_size", 8),
        "eval_strategy": "no",  # the engine evaluates once at the end of the stage
        "ddp_find_unused_parameters": False,  # frozen parts have no grads by design
        **{k: v for k, v in train.items() if k not in ENGINE_TRAIN_KEYS},  # not SFTConfig's
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
    if placement.mode == "deepspeed" and placement.device == "cpu":
        # accelerate starts no process group for DeepSpeed without a GPU (it would count one
        # process): the run makes the gloo state first and the Trainer uses it.
        settings["ddp_backend"] = "gloo"
        settings["accelerator_config"] = {"use_configured_state": True}
    if kind == "vlm":
        # Truncating a VLM row can cut image tokens out from under their features (where the
        # trainer truncates rows: an online trainer's prompts are not cut).
        if "max_length" in library_fields(TRAINERS[stage.trainer].settings_class):
            settings.setdefault("max_length", None)
        settings.setdefault("remove_unused_columns", False)
    if has_eval and settings.get("eval_strategy") not in (None, "no"):
        settings.setdefault("eval_steps", settings.get("save_steps"))
    return settings


def deepspeed_settings(config: Mapping[str, Any] | None) -> JsonObject:
    """The DeepSpeed config a stage trains with: the engine's default ZeRO-2 with the stage's
    own keys (`train.deepspeed`, a mapping or the JSON file `resolve` read) over it. ZeRO-3
    gathers the weights when saving unless the stage says otherwise: without that,
    `save_model` writes no weights and there would be nothing to commit."""
    merged = _deep_merge(DEFAULT_DEEPSPEED, config or {})
    if zero_stage(merged) == 3:
        merged["zero_optimization"].setdefault("stage3_gather_16bit_weights_on_model_save", True)
    return merged


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> JsonObject:
    merged = {
        key: dict(value) if isinstance(value, Mapping) else value for key, value in base.items()
    }
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# DeepSpeed's reduce_bucket_size default, in elements (deepspeed.runtime.zero.config).
REDUCE_BUCKET_SIZE = 500_000_000


@dataclass(frozen=True)
class ZeroSettings:
    """What the memory estimate reads of a stage's DeepSpeed config."""

    stage: int | None
    # Elements of one gradient-reduction bucket; None: "auto", which the Trainer fills with
    # hidden_size squared.
    reduce_bucket_size: int | None
    # Buckets ZeRO allocates whole and holds all through a step (with contiguous_gradients,
    # its default): ZeRO-1/2 a second one under overlap_comm; ZeRO-3 one.
    buckets: int
    width: int  # bytes an element: DeepSpeed's bf16 / fp16 model, else float32


def zero_settings(config: Mapping[str, Any], half_precision: bool) -> ZeroSettings:
    """The ZeRO settings of a merged DeepSpeed config (`deepspeed_settings`), with DeepSpeed's
    own defaults where it names none (overlap_comm defaults to on for ZeRO-3 only).
    `half_precision`: the Trainer runs bf16 or fp16, which fills the config's "auto"."""
    sixteen_bit = any(
        enabled is True or (enabled == "auto" and half_precision)
        for enabled in ((config.get(key) or {}).get("enabled") for key in ("bf16", "fp16"))
    )
    zero = config.get("zero_optimization") or {}
    stage = zero_stage(config)
    if not zero.get("contiguous_gradients", True):
        buckets = 0
    elif stage == 3:
        buckets = 1
    else:
        buckets = 2 if zero.get("overlap_comm", False) else 1
    size = zero.get("reduce_bucket_size", REDUCE_BUCKET_SIZE)
    elements = None if size == "auto" else int(float(size))
    return ZeroSettings(stage, elements, buckets, width=2 if sixteen_bit else 4)


def zero_stage(config: Mapping[str, Any] | None) -> int | None:
    """The DeepSpeed ZeRO stage of a stage's DeepSpeed config (`resolve` reads a JSON file
    named in `train.deepspeed`), else of the engine's default ZeRO-2."""
    stage = ((config or DEFAULT_DEEPSPEED).get("zero_optimization") or {}).get("stage")
    return stage if isinstance(stage, int) else None


# --------------------------------------------------------------------------- loss flags


@dataclass(frozen=True)
class LossChoice:
    """The loss flags the engine adds to a stage's `train` keys, and why (printed by `plan`)."""

    flags: dict[str, bool] = field(default_factory=dict)
    note: str = ""


def choose_loss(name: str, train: Mapping[str, Any], data_format: str, template: str) -> LossChoice:
    """The loss flag the rows call for (`row_shapes.SHAPES[data_format].loss`):
    `completion_only_loss` for prompt/completion rows, `assistant_only_loss` for conversations
    where the chat template can mark the assistant's turns (`template`: one of MARKED, PATCHED,
    UNMARKED, UNREAD, as `resolve.templates` read it), unless the stage sets it; a flag the rows
    cannot honour is refused here, before any weight loads (TRL would refuse it after)."""
    loss = SHAPES[data_format].loss
    _refuse_contradictions(name, train, data_format)
    key = f"stage.{name}.train"
    if loss.flag is None:  # no flag applies: TRL learns every token
        return LossChoice({}, f"loss: {loss.covers}")
    if loss.flag in train:
        value = _as_set(train[loss.flag])
        return LossChoice({}, f"loss: {loss.flag}={value}, as set in {key}")
    if not loss.needs_markers:
        return LossChoice({loss.flag: True}, f"loss: {loss.flag} {CHOSEN[loss.flag]}")
    why = {
        MARKED: "the chat template marks assistant turns with {% generation %}",
        PATCHED: "TRL swaps in its training version of this chat template, which marks them",
    }
    if template in why:
        return LossChoice(
            {loss.flag: True},
            f"loss: {loss.flag} ({data_format} rows; {why[template]}): {CHOSEN[loss.flag]}",
        )
    cause = {
        UNMARKED: "the chat template has no {% generation %} markers and TRL has no training "
        "version of it",
        UNREAD: "the chat template could not be read here",
    }[template]
    return LossChoice(
        {loss.flag: False},
        f"loss: on the whole conversation: {cause}, so {loss.flag} stays off "
        f"({key}.{loss.flag}=true once the template has {{% generation %}} markers)",
    )


# What each flag does, said when the plan chooses it.
CHOSEN = {
    "completion_only_loss": "(prompt/completion rows): only the completion is learned",
    "assistant_only_loss": "only the assistant replies are learned",
}
# Why a flag the rows cannot honour is refused, and the fix.
REFUSED = {
    "assistant_only_loss": "Stage `{name}` trains on prompt/completion rows ({data_format}), "
    "but stage.{name}.train.assistant_only_loss=true needs conversational rows (`messages`). "
    "Drop the key (the engine then puts the loss on the completion only: "
    "completion_only_loss), set stage.{name}.train.assistant_only_loss=false, or convert the "
    "rows to `messages`.",
    "completion_only_loss": "Stage `{name}` trains on conversational rows ({data_format}), but "
    "stage.{name}.train.completion_only_loss=true needs prompt/completion rows. Drop the key "
    "(the engine then chooses assistant_only_loss where the chat template allows it), or map "
    "your columns to prompt/completion: data.columns.prompt=<column> "
    "data.columns.completion=<column>.",
}


def _as_set(value: Any) -> str:
    """A value as the user writes it on the command line (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _refuse_contradictions(name: str, train: Mapping[str, Any], data_format: str) -> None:
    """A loss flag other than the one the rows call for, set true."""
    loss = SHAPES[data_format].loss
    for flag in LOSS_FLAGS:
        if flag != loss.flag and train.get(flag):
            refusal = loss.refusal or REFUSED[flag]
            raise RecipeError(
                refusal.format(name=name, data_format=data_format, flag=flag),
                key=f"stage.{name}.train.{flag}",
            )
