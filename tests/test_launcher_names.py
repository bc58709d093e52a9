"""Only the launchers name their scheduler: a product module's code (its identifiers and string
literals; docstrings and comments are prose and left out) names SLURM or its tools (`slurm`,
`sbatch`, `submitit`, `sacct`, `sinfo`) only where the launcher lives.

A module outside `recipe_engine/launchers/` that names SLURM in code fails, unless it is listed
in NOT_YET_MOVED (empty), and a listed one that no longer does fails too.
`config/schema.py` keeps the typed choice `launcher: local|slurm` and `SlurmConfig`, the
user's keys; `tools/` is outside the product.
"""

from __future__ import annotations

import re
from pathlib import Path

from code_words import code_words

import recipe_engine

PACKAGE = Path(recipe_engine.__file__).parent
SCHEDULER_WORDS = re.compile(r"slurm|sbatch|submitit|sacct|sinfo", re.IGNORECASE)
OUTSIDE_THE_PRODUCT = ("tools", "launchers")
ALLOWED = {"config/schema.py"}  # the user's keys: `launcher: local|slurm`, SlurmConfig
# What still names SLURM outside the launchers package: nothing now. A module that must (none
# should: ask the launcher) is listed here with its reason.
NOT_YET_MOVED: set[str] = set()


def naming_the_scheduler() -> set[str]:
    modules = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.split("/")[0] in OUTSIDE_THE_PRODUCT or relative in ALLOWED:
            continue
        if code_words(path.read_text(), SCHEDULER_WORDS):
            modules.add(relative)
    return modules


def test_only_the_launchers_name_the_scheduler_in_code():
    found = naming_the_scheduler()
    assert sorted(found - NOT_YET_MOVED) == [], "name the scheduler through the launchers"
    assert sorted(NOT_YET_MOVED - found) == [], "no longer names it: take it off the list"


def test_the_check_sees_code_and_leaves_prose_out():
    source = '''"""Submits to SLURM."""
import submitit  # sbatch
def f(partition):
    """sinfo's partition."""
    return "x" + f"{partition} via sbatch"
'''
    assert code_words(source, SCHEDULER_WORDS) == [
        "submitit",
        " via sbatch",
    ]  # an f-string's literal part
    assert code_words('"""slurm"""\n# sacct\nx = 1\n', SCHEDULER_WORDS) == []
