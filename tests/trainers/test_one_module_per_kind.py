"""A trainer kind is one module: outside `recipe_engine/trainers/` no product module names a
kind in its code (an identifier, a string, a message), so the layers ask the stage's kind what
differs and the next kind is one new module. Docstrings and comments may cite kinds as
examples; they are prose, not behaviour."""

from __future__ import annotations

import re
from pathlib import Path

from code_words import code_words

import recipe_engine
from recipe_engine.trainers import TRAINERS

PACKAGE = Path(recipe_engine.__file__).parent
KINDS = re.compile(rf"\b({'|'.join(TRAINERS)})\b", re.IGNORECASE)


def named_kinds(path: Path) -> list[str]:
    """Each word of the module's code that names a kind."""
    return code_words(path.read_text(), KINDS)


def test_no_module_outside_the_trainers_package_names_a_trainer_kind():
    outside = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "trainers"
    ]
    assert len(outside) > 150  # the scan reads the package, not an empty folder
    naming = {
        str(path.relative_to(PACKAGE)): found for path in outside if (found := named_kinds(path))
    }
    assert naming == {}


def test_the_scan_finds_a_kind_named_in_code(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text('"""Trains SFT (prose)."""\nif trainer == "dpo":\n    KTO = 1\n')
    assert named_kinds(module) == ["dpo", "KTO"]
