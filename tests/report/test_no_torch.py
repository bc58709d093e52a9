"""`report` renders records: importing every report module loads no torch, model or data
library (the measuring is `evaluate`'s, asked by the verbs; what report reads of it,
`store.scores`, is plain data). The import contract in pyproject.toml checks report's own
imports; this checks what importing them pulls in, in a fresh process."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import recipe_engine.report

REPORT = Path(recipe_engine.report.__file__).parent
HEAVY = ("torch", "transformers", "peft", "trl", "datasets")


def report_modules() -> list[str]:
    found = pkgutil.walk_packages([str(REPORT)], prefix="recipe_engine.report.")
    return ["recipe_engine.report", *(m.name for m in found)]


def test_every_report_module_is_found():
    assert {"recipe_engine.report.compare", "recipe_engine.report.run_report"} <= set(
        report_modules()
    )


def test_importing_every_report_module_loads_no_torch():
    script = (
        "import importlib, json, sys\n"
        f"for name in {report_modules()!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
