"""The ranges numeric settings must lie in, as data, and the check that names the key.

The libraries accept many values they later fail on (`max_steps=0` trains nothing,
`seed=-1` fails in numpy after the model has loaded, `lora_dropout=2` fails in the first
forward pass), so the ranges are stated here and checked while planning. NaN and infinity
are valid floats to the libraries and train into NaN weights: every number must be finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recipe_engine.errors import RecipeError


@dataclass(frozen=True)
class Bound:
    """`low <= value <= high` (strict where `*_open`); `unset` is the library's "not set"."""

    must: str  # completes "it must ...", with an example of a good value
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    unset: float | None = None
    integer: bool = False

    def holds(self, value: float) -> bool:
        if self.unset is not None and value == self.unset:
            return True
        if self.integer and value != int(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


POSITIVE_INT = Bound("be a positive integer (e.g. 8)", low=1, integer=True)
POSITIVE = Bound("be a positive number", low=0, low_open=True)
NOT_NEGATIVE = Bound("not be negative", low=0)
STEPS = Bound(
    "be positive: a number of steps, or a fraction of the run below 1", low=0, low_open=True
)
FRACTION = Bound("be a fraction in [0, 1) (e.g. 0.05)", low=0, high=1, high_open=True)

# SFTConfig fields. None always means "the library's default".
TRAIN_BOUNDS = {
    "per_device_train_batch_size": POSITIVE_INT,
    "per_device_eval_batch_size": POSITIVE_INT,
    "gradient_accumulation_steps": POSITIVE_INT,
    "num_train_epochs": POSITIVE,
    "max_steps": Bound(
        "be a positive integer, or -1 to train for num_train_epochs", low=1, unset=-1, integer=True
    ),
    "learning_rate": Bound("not be negative (e.g. 2e-4)", low=0),
    "weight_decay": NOT_NEGATIVE,
    "warmup_steps": NOT_NEGATIVE,
    "max_grad_norm": NOT_NEGATIVE,
    "logging_steps": STEPS,
    "save_steps": STEPS,
    "eval_steps": STEPS,
    "save_total_limit": Bound(
        "be a positive integer (null keeps every checkpoint; at least 1 is needed to resume)",
        low=1,
        integer=True,
    ),
    "max_length": POSITIVE_INT,
    "dataloader_num_workers": Bound("be 0 or more (0 reads data in the main process)", low=0),
    "adam_beta1": FRACTION,
    "adam_beta2": FRACTION,
    "adam_epsilon": POSITIVE,
    "label_smoothing_factor": FRACTION,
}
LORA_BOUNDS = {
    "r": POSITIVE_INT,
    "lora_alpha": POSITIVE,
    "lora_dropout": FRACTION,
}
EVAL_BOUNDS = {
    "batch_size": POSITIVE_INT,
    "max_new_tokens": POSITIVE_INT,
    "max_samples": POSITIVE_INT,
    "temperature": POSITIVE,
    "top_p": Bound("be in (0, 1] (1 keeps every token)", low=0, high=1, low_open=True),
}
SEED = Bound("be an integer from 0 to 2**32 - 1 (numpy's seed range)", low=0, high=2**32 - 1)


def check_finite(section: str, settings: Mapping[str, Any]) -> None:
    """NaN and infinity are valid floats to the libraries, and train into NaN weights."""
    for key, value in settings.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise RecipeError(
                f"`{section}.{key}` is {value}; it must be a finite number (e.g. 2e-4).",
                key=f"{section}.{key}",
            )


def check_bounds(section: str, settings: Mapping[str, Any], bounds: Mapping[str, Bound]) -> None:
    """Every bounded number in `settings` within its range (`section` prefixes the key)."""
    check_finite(section, settings)
    for key, bound in bounds.items():
        check_value(f"{section}.{key}", settings.get(key), bound)


def check_value(key: str, value: Any, bound: Bound) -> None:
    if not is_number(value) or bound.holds(value):
        return
    raise RecipeError(f"`{key}` is {value}; it must {bound.must}.", key=key)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_engine_values(seed: int, evaluation: Mapping[str, Any]) -> None:
    """The recipe's own numbers: the seed, and the evaluation's generation settings."""
    check_value("seed", seed, SEED)
    check_bounds("eval", evaluation, EVAL_BOUNDS)
