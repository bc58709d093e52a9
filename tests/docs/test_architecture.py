"""docs/architecture.md's layer table names every module of the package, in its own layer's
row, so a newcomer finds each one where the import contracts put it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "recipe_engine"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
NOT_MODULES = {"__init__", "__main__"}


def layer_rows() -> dict[str, str]:
    """{layer folder ('' for the top-level modules): its row of the layer table}."""
    rows = {}
    for line in ARCHITECTURE.read_text().splitlines():
        match = re.match(r"\| (`[^|]+`) \| (.*) \|$", line)
        if not match:
            continue
        head = match.group(1)
        folder = re.fullmatch(r"`(\w+)/`", head)
        rows[folder.group(1) if folder else ""] = head + " " + match.group(2)
    return rows


def modules() -> dict[str, list[str]]:
    """{layer folder: its modules (sub-packages' modules by their own name)}."""
    found: dict[str, list[str]] = {"": []}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] in NOT_MODULES:
            continue
        layer = parts[0] if len(parts) > 1 else ""
        found.setdefault(layer, []).append(parts[-1])
    return found


def test_every_module_is_named_in_its_layers_row():
    rows = layer_rows()
    missing = [
        f"{layer or '(top level)'}: {name}"
        for layer, names in modules().items()
        for name in names
        if f"`{name}`" not in rows.get(layer, "") and f"`{name}/`" not in rows.get(layer, "")
    ]
    assert not missing, "docs/architecture.md's layer table misses: " + ", ".join(missing)


def test_every_development_script_is_named():
    """tools/ (outside the package and the layers) has its own paragraph after the table."""
    text = ARCHITECTURE.read_text()
    paragraph = text[text.index("The development scripts are outside the package") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    scripts = sorted(p.stem for p in (ROOT / "tools").glob("*.py") if p.stem not in NOT_MODULES)
    missing = [name for name in scripts if f"`{name}`" not in paragraph]
    assert not missing, "docs/architecture.md's development scripts miss: " + ", ".join(missing)
