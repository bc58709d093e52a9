"""The package's layers hold: lower layers never import higher ones, no two modules import
each other (import-linter, configured in pyproject.toml; `make lint` runs the same check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_the_package_keeps_its_layers_and_has_no_import_cycles():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_the_check_fails_on_an_upward_import_and_on_a_cycle(tmp_path):
    package = tmp_path / "layered"
    for name, body in {
        "__init__.py": "",
        "low.py": "from layered import high\n",  # upward
        "high.py": "import layered.low\n",
        "a.py": "from layered import b\n",  # a <-> b
        "b.py": "from layered import a\n",
    }.items():
        package.mkdir(exist_ok=True)
        (package / name).write_text(body)
    config = tmp_path / "lint.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "layered"\n'
        '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
        'layers = ["layered.high", "layered.low"]\n'
        '[[tool.importlinter.contracts]]\nname = "cycles"\ntype = "acyclic_siblings"\n'
        'ancestors = ["layered"]\n'
    )
    result = lint_imports(tmp_path, "--config", str(config))
    assert result.returncode != 0
    assert "layered.low is not allowed to import layered.high" in result.stdout
    assert "0 kept, 2 broken" in result.stdout
