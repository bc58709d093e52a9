"""The rows read in this process, by the content key of what was read (`Rows.read_key`).

A plan carries its rows' description and content key, never the rows themselves; the first
step that needs them reads them (`Rows.splits`), and a plan's survey that has just read them
leaves them here, so a `plan` then `run` in one process reads each dataset once. The last few
are kept: a sweep in one process moves on to other data.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recipe_engine.resolve.data import DataSplits

KEPT = 4
_read: OrderedDict[str, DataSplits] = OrderedDict()


def read_once(key: str, read: Callable[[], DataSplits]) -> DataSplits:
    """The rows read under `key` in this process, read now (`read`) if they were not."""
    if key not in _read:
        _read[key] = read()
        while len(_read) > KEPT:
            _read.popitem(last=False)
    _read.move_to_end(key)
    return _read[key]
