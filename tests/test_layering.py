"""The package's layers hold: lower layers never import higher ones, no two modules import
each other (import-linter, configured in pyproject.toml; `make lint` runs the same check).

import-linter's `acyclic_siblings` contract squashes every package into one node per level, so
it catches cycles between siblings and between packages, but not a package's `__init__` and one
of its own submodules importing each other; the module-level cycle check below covers that too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp  # import-linter's own graph builder (installed with it)

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def module_cycles(package: str) -> list[list[str]]:
    """Every set of modules of `package` that import each other (strongly connected components
    of more than one module), imports inside functions and TYPE_CHECKING blocks included."""
    graph = grimp.build_graph(package, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan; the package is small enough to recurse
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_the_package_keeps_its_layers_and_has_no_import_cycles():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert module_cycles("recipe_engine") == []


def write_probe_package(root: Path) -> None:
    """A throwaway package with one planted upward import (inside a function, across packages:
    together with the import back it is also a cross-package cycle), one planted two-module
    cycle between siblings, and one planted cycle between a package and its own submodule."""
    for name, body in {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/x.py": "def f():\n    from layering_probe.high import y\n",  # upward
        "high/__init__.py": "",
        "high/y.py": "from layering_probe.low import x\n",
        "high/a.py": "from layering_probe.high import b\n",  # a <-> b
        "high/b.py": "import layering_probe.high.a\n",
        "mid/__init__.py": "from layering_probe.mid import m\n",  # mid <-> mid.m
        "mid/m.py": "import layering_probe.mid\n",
    }.items():
        path = root / "layering_probe" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


def test_the_check_fails_on_an_upward_import_and_on_a_cycle(tmp_path, monkeypatch):
    write_probe_package(tmp_path)
    config = tmp_path / "lint.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "layering_probe"\n'
        '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
        'layers = ["layering_probe.high", "layering_probe.mid", "layering_probe.low"]\n'
        '[[tool.importlinter.contracts]]\nname = "cycles"\ntype = "acyclic_siblings"\n'
        'ancestors = ["layering_probe"]\n'
    )
    result = lint_imports(tmp_path, "--config", str(config))
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "0 kept, 2 broken" in out, out
    assert "layering_probe.low is not allowed to import layering_probe.high" in out, out
    assert "layering_probe.low.x -> layering_probe.high.y (l.2)" in out, out
    assert "No cycles are allowed in layering_probe.high." in out, out  # a <-> b
    assert "- .a -> .b (1 import)" in out or "- .b -> .a (1 import)" in out, out
    assert "No cycles are allowed in layering_probe." in out, out  # low <-> high

    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("layering_probe") == [
        ["layering_probe.high.a", "layering_probe.high.b"],
        ["layering_probe.high.y", "layering_probe.low.x"],
        ["layering_probe.mid", "layering_probe.mid.m"],
    ]
