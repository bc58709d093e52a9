"""Packing and padding-free (`stage.<name>.train.packing`, `padding_free`, TRL's names): whether
a stage's rows stay apart when TRL runs several of them as one sequence, decided before any
weight loads.

What TRL 1.16 and transformers 5.x do (read in their sources):

- `packing=true` with `packing_strategy` "bfd" (the default) or "bfd_split" packs rows into
  sequences of `max_length` tokens and turns padding-free on; "wrapped" cuts rows mid-sequence
  and keeps an all-ones attention mask, so a row attends to the one before it: refused.
- padding-free (`padding_free=true`, or BFD packing) concatenates a batch's rows into one
  sequence with no attention mask; `position_ids` restart at 0 where each row starts, and the
  collator passes `cu_seq_lens` for the varlen kernels. FlashAttention 2/3 read those
  boundaries; sdpa and eager keep rows apart only where the model's decoder builds its mask with
  transformers' `masking_utils` from `position_ids` (it detects packed sequences when no mask
  is passed). Elsewhere rows would attend across each other: refused.
- Without packing, padding-free does not truncate: TRL refuses it unless `max_length` is null.
- TRL refuses both on image rows (a row's image tokens must meet their own features); DPO's
  `padding_free` falls back to padding (its refactor); ORPO and KTO have neither key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.errors import RecipeError
from recipe_engine.trainers.kind import Packing, TrainerKind

PACKING_KEYS = ("packing", "padding_free")
# BFD packing turns padding-free on (SFTTrainer: `args.packing_strategy in {"bfd", "bfd_split"}`).
BFD_STRATEGIES = ("bfd", "bfd_split")
DEFAULT_STRATEGY = "bfd"
DEFAULT_MAX_LENGTH = 1024  # SFTConfig's
# What the engine loads with: it passes no attn_implementation, so transformers 5.x's default.
DEFAULT_ATTENTION = "sdpa"
# Kernels that read the collator's `cu_seq_lens` (every model).
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
# Attention that honours a mask built from `position_ids`.
MASKED_ATTENTION = ("sdpa", "eager", "flex_attention")
# Model types whose decoder (transformers 5.23) builds its attention mask with masking_utils'
# create_causal_mask / create_sliding_window_causal_mask, given `position_ids`: under sdpa or
# eager, packed rows stay apart. tests/plan/test_packing.py reads each one's modeling file.
MASKS_FROM_POSITIONS = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "smollm3",
    "olmo2",
    "granite",
    "cohere",
    "starcoder2",
)


@dataclass(frozen=True)
class PackingFacts:
    """What the decision reads of a stage besides its `train` keys."""

    name: str
    trainer: TrainerKind  # the chosen trainer
    model_type: str | None  # the model's config.json model_type; None: not readable here
    attention: str  # the attention implementation the model loads with
    image_rows: bool


@dataclass(frozen=True)
class PackingChoice:
    """The stage's `train` keys after the decision, and what `plan` prints about it."""

    train: LibraryKwargs
    notes: list[str] = field(default_factory=list)
    kept_apart_by: str = ""  # packed or padding-free rows: what keeps them apart

    def tokens_note(self, world_size: int) -> list[str]:
        """The effective tokens of one optimizer step, said once placement knows the devices."""
        if not self.kept_apart_by:
            return []
        return [tokens_per_step(self.train, self.kept_apart_by, world_size)]


def attention_implementation(config: Mapping[str, Any] | None) -> str:
    """The attention a model loads with: what its config.json names, else transformers'
    default (the engine passes none)."""
    config = config or {}
    named = config.get("attn_implementation") or config.get("_attn_implementation")
    return str(named) if named else DEFAULT_ATTENTION


def check_attention_trains_on(name: str, attention: str, device: str) -> None:
    """torch's flex_attention has no backward pass on the CPU ("FlexAttention does not
    support backward on CPU", torch 2.14): a stage of a model whose config.json names it would
    fail at its preflight there."""
    if attention == "flex_attention" and device == "cpu":
        raise RecipeError(
            f"Stage `{name}` would train on the CPU with flex_attention (its model's config.json "
            "names attn_implementation flex_attention), which torch cannot run backward on a "
            "CPU. Train it on a GPU (device=cuda), or use a copy of the model whose config.json "
            "names sdpa.",
            key="device",
        )


def flattens_rows(train: Mapping[str, Any]) -> bool:
    """TRL runs each batch as one sequence of its rows (padding-free, or BFD packing)."""
    strategy = train.get("packing_strategy", DEFAULT_STRATEGY)
    return bool(train.get("padding_free")) or (
        bool(train.get("packing")) and strategy in BFD_STRATEGIES
    )


def decide_packing(train: LibraryKwargs, facts: PackingFacts) -> PackingChoice:
    """`train` as the stage runs it: unchanged without packing keys; refused (one message) where
    rows would attend across each other or TRL would refuse; the keys dropped, with the reason,
    where the stage cannot use them but trains the same without (its key then is the key
    without them)."""
    asked = [key for key in PACKING_KEYS if train.get(key)]
    if not asked:
        return PackingChoice(train)
    key = f"stage.{facts.name}.train"
    if facts.image_rows:
        raise RecipeError(
            f"Stage `{facts.name}` trains on image rows, but {key}.{asked[0]}=true: TRL packs no "
            "image rows and runs none padding-free (each row's image tokens must meet their "
            f"own image features). Drop {key}.{asked[0]}.",
            key=f"{key}.{asked[0]}",
        )
    if facts.trainer.packing is Packing.PADS:
        return _without(train, facts.trainer.packing_note)
    if facts.trainer.packing is Packing.NONE:
        return PackingChoice(train)  # no such keys: config.library_keys refused them
    _refuse_unbounded(train, key, facts.name)
    where = _isolation(facts)
    if where is None:
        return _without(
            train,
            "packing / padding-free: off: the model's config is not readable here, so whether "
            "its attention keeps packed rows apart cannot be checked; the stage trains unpacked",
        )
    if not where:
        raise RecipeError(
            f"{key}.{asked[0]}=true would let the rows of a batch attend to each other: "
            f"`{facts.model_type}` with {facts.attention} attention builds no mask from "
            "position_ids, so nothing keeps packed rows apart. Drop the key, or use a model "
            "whose config.json names attn_implementation flash_attention_2 (its kernels read "
            "the row boundaries TRL passes).",
            key=f"{key}.{asked[0]}",
        )
    return PackingChoice(train, kept_apart_by=where)


def _refuse_unbounded(train: LibraryKwargs, key: str, name: str) -> None:
    """What TRL refuses after loading: wrapped packing (rows cut and attending across each
    other), packing without a length, padding-free without packing and with a length."""
    max_length = train.get("max_length", DEFAULT_MAX_LENGTH)
    if train.get("packing") and train.get("packing_strategy") not in (None, *BFD_STRATEGIES):
        raise RecipeError(
            f"{key}.packing_strategy={train['packing_strategy']} cuts rows mid-sequence and "
            f"keeps one attention mask over the packed sequence, so stage `{name}`'s rows would "
            f"attend to each other. Use {key}.packing_strategy=bfd (the default): it keeps "
            "rows whole and apart.",
            key=f"{key}.packing_strategy",
        )
    if train.get("packing") and max_length is None:
        raise RecipeError(
            f"{key}.packing=true packs rows into sequences of max_length tokens, but "
            f"{key}.max_length is null. Set {key}.max_length (e.g. 1024).",
            key=f"{key}.max_length",
        )
    if train.get("padding_free") and not train.get("packing") and max_length is not None:
        raise RecipeError(
            f"{key}.padding_free=true without packing does not truncate rows, so "
            f"max_length={max_length} would not hold. Set {key}.max_length=null, or pack the "
            f"rows: {key}.packing=true.",
            key=f"{key}.padding_free",
        )


def _isolation(facts: PackingFacts) -> str | None:
    """What keeps packed rows apart ("" nothing; None: the model is not known here)."""
    if facts.attention in VARLEN_ATTENTION:
        return f"{facts.attention} reads the row boundaries (cu_seq_lens)"
    if facts.model_type is None:
        return None
    if facts.attention in MASKED_ATTENTION and facts.model_type in MASKS_FROM_POSITIONS:
        return (
            f"{facts.attention} attention with a mask transformers builds from position_ids "
            f"({facts.model_type})"
        )
    return ""


def tokens_per_step(train: Mapping[str, Any], where: str, world_size: int) -> str:
    """The effective tokens of one optimizer step of packed or padding-free rows."""
    batch = int(train.get("per_device_train_batch_size", 8))
    accumulation = int(train.get("gradient_accumulation_steps", 1))
    rows_per_step = batch * accumulation * world_size
    if train.get("packing"):
        length = int(train.get("max_length", DEFAULT_MAX_LENGTH))
        strategy = train.get("packing_strategy", DEFAULT_STRATEGY)
        return (
            f"packing: rows packed ({strategy}) into sequences of {length} tokens, run "
            f"padding-free, kept apart by {where}; up to {rows_per_step * length} tokens a "
            f"step ({batch} x {length} x {accumulation} accumulation x {world_size} "
            "device(s)), no padding"
        )
    return (
        f"padding-free: each batch of {batch} rows runs as one sequence of their tokens, kept "
        f"apart by {where}; {rows_per_step} rows a step ({batch} x {accumulation} accumulation "
        f"x {world_size} device(s)), their own tokens, no padding"
    )


def _without(train: LibraryKwargs, note: str) -> PackingChoice:
    kept = {k: v for k, v in train.items() if k not in (*PACKING_KEYS, "packing_strategy")}
    return PackingChoice(kept, [note])
