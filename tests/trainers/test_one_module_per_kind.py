"""A trainer kind is one module: outside `recipe_engine/trainers/` no product module names a
kind in its code (an identifier, a string, a message), so the layers ask the stage's kind what
differs and the next kind is one new module. Docstrings and comments may cite kinds as
examples; they are prose, not behaviour."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import recipe_engine
from recipe_engine.trainers import TRAINERS

PACKAGE = Path(recipe_engine.__file__).parent
KINDS = re.compile(rf"\b({'|'.join(TRAINERS)})\b", re.IGNORECASE)


def docstrings(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, owners)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def named_kinds(path: Path) -> list[str]:
    """Each place the module's code names a kind: `line: what`."""
    tree = ast.parse(path.read_text())
    prose = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = id(node) not in prose and KINDS.search(node.value)
        elif isinstance(node, ast.Name | ast.Attribute | ast.alias | ast.arg):
            word = getattr(node, "id", None) or getattr(node, "attr", None)
            word = word or getattr(node, "name", None) or getattr(node, "arg", None)
            named = KINDS.fullmatch(word or "")
        else:
            continue
        if named:
            found.append(f"{getattr(node, 'lineno', '?')}: {named.group(0)}")
    return found


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
    assert named_kinds(module) == ["2: dpo", "3: KTO"]
