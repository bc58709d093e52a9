"""Every example the fuzzer ever broke the invariant with (tests/fuzz/found/*.json), replayed:
what was found stays fixed."""

from __future__ import annotations

from invariant import FOUND, load
from properties import holds, on_a_damaged_store


def test_every_found_example_keeps_the_invariant() -> None:
    cases = sorted(FOUND.glob("*.json"))
    assert len(cases) >= 3, f"the found cases are gone from {FOUND}"  # three are committed
    for path in cases:
        example = load(path)
        if example.what.startswith("store"):
            on_a_damaged_store(example)
        else:
            holds(example)
