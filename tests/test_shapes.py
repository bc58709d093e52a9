"""Typed objects between modules: the engine's own public functions and methods take and give
untyped dicts (`JsonObject`, `LibraryKwargs`, `dict[str, Any]`) only at the edges, and the
count only goes down. What is left (38 on 2026-11-29, the workbench's chat worker status
added): JSON edges (records' to_json / from_json, the web view's responses, the cache's
records, JSON files read, the composed config as plain data) and the libraries' keyword
arguments (a stage's `train` keys are TRL's, a DeepSpeed config is DeepSpeed's)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import recipe_engine

PACKAGE = Path(recipe_engine.__file__).parent
UNTYPED = ("JsonObject", "LibraryKwargs", "dict[str, Any]")
AT_MOST = 38


def boundary_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """A module's public functions and its classes' public methods."""
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        for member in members:
            is_function = isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and not member.name.startswith("_"):
                yield member


def untyped_crossings() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for function in boundary_functions(ast.parse(path.read_text())):
            given = function.args
            arguments = (*given.posonlyargs, *given.args, *given.kwonlyargs)
            hints = [a.annotation for a in arguments if a.annotation] + [function.returns]
            for hint in filter(None, hints):
                text = ast.unparse(hint)
                found += [
                    f"{path.relative_to(PACKAGE)}:{function.name}" for u in UNTYPED if u in text
                ]
    return found


def test_untyped_dicts_cross_module_boundaries_no_more_often_than_before():
    crossings = untyped_crossings()
    assert len(crossings) > 20  # the scan reads the package's signatures
    assert len(crossings) <= AT_MOST, "\n".join(crossings)
