"""Only the launchers name their scheduler.

- A product module's code (its identifiers and string literals; docstrings and comments are
  prose and left out) names SLURM or its tools (`slurm`, `srun`, `sbatch`, `submitit`,
  `sacct`, `sinfo`) only where the launchers live, and Ray (`ray`, `RayConfig`, `RAY_ADDRESS`)
  only in its own launcher (`launchers/ray/`), its line in the registry and the config schema
  (the user's keys: `launcher: local|slurm|ray`, `SlurmConfig`, `RayConfig`).
- `plan/` names no scheduler at all, prose included: a plain grep of its files finds none.

A module outside those places that names one fails, unless it is listed in NOT_YET_MOVED
(empty), and a listed one that no longer does fails too. `tools/` is outside the product.
"""

from __future__ import annotations

import re
from pathlib import Path

from code_words import code_words

import recipe_engine

PACKAGE = Path(recipe_engine.__file__).parent
SLURM_WORDS = re.compile(r"slurm|srun|sbatch|submitit|sacct|sinfo", re.IGNORECASE)
# `ray` as a word of its own (not `array`, `tray`): in snake_case, CamelCase or CAPITALS.
RAY_WORDS = re.compile(r"(?<![A-Za-z])[Rr]ay(?![a-z])|(?<![A-Za-z])RAY(?![A-Z])")
ALLOWED = {
    SLURM_WORDS: ("tools/", "launchers/", "config/schema.py"),
    RAY_WORDS: ("tools/", "launchers/ray/", "launchers/registry.py", "config/schema.py"),
}
# What still names a scheduler outside its launcher: nothing now. A module that must (none
# should: ask the launcher) is listed here with its reason.
NOT_YET_MOVED: set[str] = set()


def naming(words: re.Pattern[str]) -> set[str]:
    modules = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED[words]):
            continue
        if code_words(path.read_text(), words):
            modules.add(relative)
    return modules


def test_only_the_launchers_name_slurm_in_code():
    found = naming(SLURM_WORDS)
    assert sorted(found - NOT_YET_MOVED) == [], "name the scheduler through the launchers"
    assert sorted(NOT_YET_MOVED - found) == [], "no longer names it: take it off the list"


def test_only_rays_own_launcher_names_ray_in_code():
    assert sorted(naming(RAY_WORDS)) == [], "name Ray through its launcher"


def test_plan_names_no_scheduler_even_in_prose():
    found = {
        f"{path.relative_to(PACKAGE).as_posix()}:{number}: {line.strip()}"
        for path in sorted((PACKAGE / "plan").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SLURM_WORDS.search(line) or RAY_WORDS.search(line)
    }
    assert sorted(found) == []


def test_the_check_sees_code_and_leaves_prose_out():
    source = '''"""Submits to SLURM."""
import submitit  # sbatch
def f(partition):
    """sinfo's partition."""
    return "x" + f"{partition} via sbatch"
'''
    assert code_words(source, SLURM_WORDS) == [
        "submitit",
        " via sbatch",
    ]  # an f-string's literal part
    assert code_words('"""slurm"""\n# sacct\nx = 1\n', SLURM_WORDS) == []


def test_ray_is_found_as_a_word_and_not_inside_another():
    source = "import ray\nclass RayConfig: ...\nA = 'RAY_ADDRESS'\nx = array = tray = 'x-ray'\n"
    found = sorted(code_words(source, RAY_WORDS))
    assert found == ["RAY_ADDRESS", "RayConfig", "ray", "x-ray"]  # not array, tray
