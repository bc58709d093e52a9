"""`ui` reads records only: importing every ui module loads no torch, model or data library
(the import contract in pyproject.toml checks ui's own imports; this checks what importing
them pulls in, in a fresh process), and neither `run` nor `evaluate`."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import recipe_engine.ui

UI = Path(recipe_engine.ui.__file__).parent
HEAVY = ("torch", "transformers", "peft", "trl", "datasets")


def ui_modules() -> list[str]:
    found = pkgutil.walk_packages([str(UI)], prefix="recipe_engine.ui.")
    return ["recipe_engine.ui", *(m.name for m in found)]


def test_every_ui_module_is_found():
    assert {"recipe_engine.ui.app", "recipe_engine.ui.runs", "recipe_engine.ui.server"} <= set(
        ui_modules()
    )


def test_importing_every_ui_module_loads_no_torch_nor_run_nor_evaluate():
    script = (
        "import importlib, json, sys\n"
        f"for name in {ui_modules()!r}: importlib.import_module(name)\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "layers = sorted({m.split('.')[1] for m in sys.modules if m.startswith("
        "('recipe_engine.run', 'recipe_engine.evaluate'))})\n"
        "print(json.dumps(heavy + layers))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
