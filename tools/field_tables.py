"""Ship the field tables of the installed libraries (`config.field_tables`): run after
`constraints.txt` changes (`make constraints` does), and commit what it writes."""

from __future__ import annotations

from recipe_engine.config.field_tables import FieldTable, table_versions, write_shipped
from recipe_engine.config.library_keys import library_classes, read_library_fields


def main() -> None:
    for class_name, (_module, _attr, dist) in library_classes().items():
        fields = read_library_fields(class_name)
        table = FieldTable(class_name, table_versions(dist, fields), fields)
        print(f"{write_shipped(table)}: {table.versions}")


if __name__ == "__main__":
    main()
