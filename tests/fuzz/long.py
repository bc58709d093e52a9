"""`make fuzz`: every property of properties.py, unseeded, round after round until the time is
up (FUZZ_MINUTES, default 60). Each broken invariant is saved under tests/fuzz/found/ (the
shrunk example) and reported; the run goes on with the other properties.

    python tests/fuzz/long.py --minutes 60
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
for name, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
    os.environ.setdefault(name, value)  # as tests/conftest.py sets them: no hub here

import invariant  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from properties import PROPERTIES  # noqa: E402

# Examples per round: a round of each property takes about a minute here.
ROUND = {
    "overrides": 150,
    "data files": 150,
    "model folders": 100,
    "store entries": 50,
    "verb order": 2,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", 60)))
    minutes = parser.parse_args().minutes
    deadline = time.time() + 60 * minutes
    examples: Counter[str] = Counter()
    broken: list[str] = []
    rounds = 0
    # Settings once per property: each call then searches afresh, from a new random seed.
    properties = {
        name: settings(
            max_examples=ROUND[name],
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )(prop)
        for name, prop in PROPERTIES.items()
    }
    while time.time() < deadline:
        rounds += 1
        for name, prop in properties.items():
            if time.time() >= deadline:
                break
            before = sum(invariant.outcomes.values())
            try:
                prop()
            except Exception as error:  # noqa: BLE001 - a broken invariant: reported, run goes on
                broken.append(f"{name}: {str(error).splitlines()[0][:300]}")
                print(f"BROKEN {broken[-1]}", flush=True)
            examples[name] += sum(invariant.outcomes.values()) - before
        print(
            f"round {rounds}: {dict(examples)} examples, exits {dict(invariant.outcomes)}",
            flush=True,
        )
    print(f"fuzzed {minutes:g} min: {sum(examples.values())} examples in {rounds} round(s)")
    for line in broken:
        print(f"BROKEN {line}")
    print(f"found cases: {len(list(invariant.FOUND.glob('*.json')))} in {invariant.FOUND}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
