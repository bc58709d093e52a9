"""The fuzzer, seeded and bounded (about a minute on this project's 2-core machine): every
property of properties.py with a fixed seed and a fixed number of examples, so `make test`
checks the same examples every time. `make fuzz` runs them unseeded for as long as it is
given (long.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from properties import PROPERTIES

# Examples per property: a plan takes about 0.3 s, a damaged store a little more, a sequence
# of verbs with runs in it tens of seconds.
BOUNDED = {
    "overrides": 40,
    "data files": 30,
    "model folders": 15,
    "store entries": 12,
    "verb order": 1,
}
SEEDED = dict(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_the_invariant_holds(name: str) -> None:
    prop = PROPERTIES[name]
    settings(max_examples=BOUNDED[name], **SEEDED)(prop)()
