"""Code others can carry on: no module over 500 lines, no function over 60 lines, and no
function taking more than 5 parameters (a small typed object carries more), in the package and
in the development scripts under tools/."""

from __future__ import annotations

import ast
from pathlib import Path

import recipe_engine

PACKAGE = Path(recipe_engine.__file__).parent
TOOLS = Path(__file__).resolve().parents[1] / "tools"  # the checkout's development scripts
MODULE_LINES, FUNCTION_LINES, PARAMETERS = 500, 60, 5


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    given = function.args
    names = [a.arg for a in (*given.posonlyargs, *given.args, *given.kwonlyargs)]
    return [n for n in names if n not in ("self", "cls")]


def sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *TOOLS.rglob("*.py")])


def name(path: Path) -> str:
    """recipe_engine/... or tools/..."""
    return str(path.relative_to((PACKAGE if path.is_relative_to(PACKAGE) else TOOLS).parent))


def test_no_module_is_over_500_lines():
    long = {name(p): n for p in sources() if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines():
    long = {
        f"{name(p)}:{f.name}": f.end_lineno - f.lineno + 1
        for p in sources()
        for f in functions(p)
        if f.end_lineno - f.lineno + 1 > FUNCTION_LINES
    }
    assert long == {}


def test_no_function_takes_more_than_5_parameters():
    many = {
        f"{name(p)}:{f.name}": len(parameters(f))
        for p in sources()
        for f in functions(p)
        if len(parameters(f)) > PARAMETERS
    }
    assert many == {}
