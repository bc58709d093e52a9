"""The UI works offline from an installed wheel: every template, style and script it serves is
package data (pyproject.toml's globs cover each file), and the pages name nothing from
elsewhere."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import tomllib  # Python 3.11+, as the suite runs

import recipe_engine

PACKAGE = Path(recipe_engine.__file__).parent
ROOT = PACKAGE.parent


def test_every_ui_template_and_static_file_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["recipe_engine"]
    files = [
        path.relative_to(PACKAGE).as_posix()
        for folder in ("ui/templates", "ui/static")
        for path in (PACKAGE / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    assert len(files) >= 5
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not missing, f"not shipped in the wheel: {missing}"


def test_templates_and_styles_load_nothing_from_elsewhere():
    for path in [*(PACKAGE / "ui" / "templates").glob("*.html"), PACKAGE / "ui/static/ui.css"]:
        text = path.read_text()
        assert not re.search(r"(https?:)?//[\w.-]+\.\w+/", text), path.name
        assert "@import" not in text and "url(http" not in text, path.name
