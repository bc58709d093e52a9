"""What importing a package's modules pulls in, seen in a fresh process (the import contracts
in pyproject.toml check a layer's own imports; this checks everything they load in turn)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODEL_LIBRARIES = ("torch", "transformers", "peft", "trl", "datasets")


def package_modules(package: ModuleType) -> list[str]:
    """The package and every module under it, by name."""
    folder = Path(package.__file__).parent
    found = pkgutil.walk_packages([str(folder)], prefix=f"{package.__name__}.")
    return [package.__name__, *(m.name for m in found)]


def loaded_after_importing(modules: Sequence[str], watched: Sequence[str]) -> list[str]:
    """Which of `watched` (modules, or package prefixes ending in a dot) a fresh process holds
    after importing `modules`, sorted."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        f"watched = {list(watched)!r}\n"
        "print(json.dumps(sorted(w for w in watched if any(\n"
        "    m == w or (w.endswith('.') and m.startswith(w)) for m in sys.modules))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
