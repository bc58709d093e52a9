"""The rows a stage holds out for evaluation when its data has no held-out split of its own.

Users' files almost never come split, so `data.eval_fraction` left at null (auto) holds out a
share of the training rows, chosen by the data's content rather than by the engine's `seed`:
every seed of an experiment is asked the same held-out rows, and an evaluation stage reading
the data its parent trained on holds out the rows the parent did not see. An explicit
`data.eval_fraction` keeps drawing with the seed (its keys name the rows they always named).

Public: `HeldOut` (how the held-out rows were obtained), `split_off`, `rows_identity`.
``datasets`` is only used through the datasets handed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from recipe_engine.errors import RecipeError
from recipe_engine.hashing import canonical_hash

if TYPE_CHECKING:
    import datasets

# The automatic hold-out: a tenth of the rows is the share most fine-tuning tools default to,
# enough to measure on while leaving nine tenths to learn from.
AUTO_SHARE = 0.1
# Fewer held-out rows than this measure nothing: one answer would move exact match by 25%+.
AUTO_MIN_ROWS = 4
# More rows sharpen no comparison, but every evaluation and `compare` generates an answer for
# each of them.
AUTO_MAX_ROWS = 500
# Below this many rows the floor would take a fifth or more of the training rows away, and
# the few rows left to measure on would say little: such data trains on every row, unevaluated.
AUTO_MIN_DATA_ROWS = 20


class HeldOut(str, Enum):
    """How a stage's held-out rows were obtained (a `str`, so records keep it as text)."""

    SPLIT = "split"  # the data's own eval / validation / test split (data.eval_split)
    FRACTION = "fraction"  # data.eval_fraction of the training rows, drawn with the seed
    AUTO = "auto"  # the automatic share of the training rows, chosen by the data's content
    TOO_FEW = "too few"  # automatic, but too few rows to spare any: every row trains
    NONE = "none"  # data.eval_fraction=0, or no evaluation reads them: every row trains


def auto_count(total: int) -> int:
    """How many of `total` training rows the automatic rule holds out (0: too few rows)."""
    if total < AUTO_MIN_DATA_ROWS:
        return 0
    return min(AUTO_MAX_ROWS, max(AUTO_MIN_ROWS, round(total * AUTO_SHARE)))


def split_off(
    rows: datasets.Dataset,
    label: str,
    fraction: float | None,
    *,
    seed: int,
    content: Callable[[], str],
) -> tuple[datasets.Dataset, datasets.Dataset | None, HeldOut]:
    """(train, held out, how) of the rows of data without a held-out split (`label` names
    them): `fraction` is the checked `data.eval_fraction`, None for automatic, which draws
    with `content()` (a hex digest of the data) where an explicit fraction draws with `seed`."""
    if fraction is None:
        count = auto_count(len(rows))
        if not count:
            return rows, None, HeldOut.TOO_FEW
        train, held_out = _partition(rows, count, random.Random(int(content(), 16)))
        return train, held_out, HeldOut.AUTO
    if fraction == 0:
        return rows, None, HeldOut.NONE
    return (*_fraction_split(rows, label, fraction, seed), HeldOut.FRACTION)


def _fraction_split(
    rows: datasets.Dataset, label: str, fraction: float, seed: int
) -> tuple[datasets.Dataset, datasets.Dataset]:
    n = len(rows)
    n_eval = max(1, round(n * fraction))
    if n - n_eval < 1:
        raise RecipeError(
            f"{label} has {n} row(s): too few to split off eval_fraction={fraction}. "
            "Add rows, provide an eval file, or set data.eval_fraction=0.",
            key="data.eval_fraction",
        )
    return _partition(rows, n_eval, random.Random(seed))


def _partition(
    rows: datasets.Dataset, count: int, draw: random.Random
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """`count` rows drawn out; the file's order kept within each part, so that `max_samples`
    takes the first training rows."""
    order = list(range(len(rows)))
    draw.shuffle(order)
    held_out = set(order[:count])
    train = [i for i in range(len(rows)) if i not in held_out]
    return rows.select(train), rows.select(sorted(held_out))


def rows_identity(identity: str, how: HeldOut) -> str:
    """The identity of the rows a stage trains on: the data's identity, and for the automatic
    hold-out the rule that chose the rows (other training rows than the data read with
    `data.eval_fraction=0`, whose identity the data's is)."""
    if how is not HeldOut.AUTO:
        return identity
    rule = {
        "held_out": how.value,
        "share": AUTO_SHARE,
        "rows": [AUTO_MIN_ROWS, AUTO_MAX_ROWS],
        "min_data_rows": AUTO_MIN_DATA_ROWS,
        "chosen_by": "content",
    }
    return canonical_hash({"data": identity, **rule})
