"""The library field tables shipped with the engine, for the versions `constraints.txt` pins.

`library_keys` checks `train` / `lora` / `quantization` keys against the libraries' own
classes. Reading a class's fields means importing it, and importing TRL costs seconds (about
10 s of a 21 s first `plan` on a 2-core CPU), so the tables of the pinned versions travel with
the package: a first `plan` on an empty cache imports no TRL. A table is used only when every
library it was read from is installed at the version it records; any other install reads its
classes as before and keeps the table in the user's cache.

Refresh after changing `constraints.txt` (`make constraints` does): `make field-tables`
(the checkout's `tools/field_tables.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.files import JsonObject, atomic_write_text
from recipe_engine.versions import package_version

SHIPPED = Path(__file__).parent / "field_tables"


@dataclass(frozen=True)
class FieldTable:
    """One class's fields as `library_keys` caches them (name -> {type, choices}), and the
    version of every distribution they were read from (the class's own; transformers too
    where the `report_to` choices come from it)."""

    class_name: str
    versions: dict[str, str]
    fields: JsonObject

    def matches_installed(self) -> bool:
        return all(package_version(dist) == version for dist, version in self.versions.items())


def shipped_path(class_name: str) -> Path:
    return SHIPPED / f"{class_name}.json"


def shipped_fields(class_name: str) -> JsonObject | None:
    """The shipped table of `class_name`, when the installed libraries are the ones it was
    read from; None otherwise (read the class itself)."""
    try:
        recorded = json.loads(shipped_path(class_name).read_text())
    except (OSError, ValueError):
        return None
    table = FieldTable(class_name, recorded["versions"], recorded["fields"])
    return table.fields if table.matches_installed() else None


def table_versions(dist: str, fields: JsonObject) -> dict[str, str]:
    """The distributions a table was read from, at their installed versions."""
    dists = [dist, *(["transformers"] if "report_to" in fields else [])]
    return {name: package_version(name) or "" for name in dict.fromkeys(dists)}


def write_shipped(table: FieldTable) -> Path:
    path = shipped_path(table.class_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    recorded = {"versions": table.versions, "fields": table.fields}
    atomic_write_text(path, json.dumps(recorded, indent=2) + "\n")
    return path
