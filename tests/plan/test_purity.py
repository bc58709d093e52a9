"""`plan` decides on what `resolve` read: its modules import no torch, model, data or hub
library, and read no file, ask no network and start no process, so a plan is pure data in,
pure data out, unit-testable in milliseconds."""

from __future__ import annotations

import ast
from pathlib import Path

from fresh_imports import MODEL_LIBRARIES, loaded_after_importing, package_modules

import recipe_engine.plan

PLAN = Path(recipe_engine.plan.__file__).parent
HEAVY = (*MODEL_LIBRARIES, "huggingface_hub", "bitsandbytes")
# Modules whose use is I/O: files, processes, sockets, the environment.
IO_MODULES = {"os", "pathlib", "subprocess", "shutil", "socket", "tempfile", "urllib", "http", "io"}
IO_CALLS = {"open", "input", "print", "exec", "eval"}


def test_importing_every_plan_module_loads_no_heavy_library():
    assert loaded_after_importing(package_modules(recipe_engine.plan), HEAVY) == []


def test_plan_modules_do_no_io():
    offenders = []
    for path in sorted(PLAN.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            offenders += [f"{path.name}: {why}" for why in _io_in(node)]
    assert offenders == []


def _io_in(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [f"import {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [f"from {node.module}"] if node.module.split(".")[0] in IO_MODULES else []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
        return [f"{node.func.id}() on line {node.lineno}"]
    return []


def test_the_checks_see_io_where_there_is_some():
    """The check above can fail: a module that opens a file or runs a process is caught."""
    code = "import subprocess\nfrom pathlib import Path\ndef f():\n    return open('x')\n"
    found = [why for node in ast.walk(ast.parse(code)) for why in _io_in(node)]
    assert found == ["import subprocess", "from pathlib", "open() on line 4"]
