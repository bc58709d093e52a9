"""The library field tables shipped for the pinned versions: the same tables the installed
classes give, and a first check on an empty cache that imports no TRL."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recipe_engine.config import field_tables
from recipe_engine.config.library_keys import library_classes, read_library_fields


@pytest.mark.parametrize("class_name", list(library_classes()))
def test_a_shipped_table_is_what_the_installed_class_gives(class_name):
    shipped = field_tables.shipped_fields(class_name)
    assert shipped is not None, (
        "no shipped table matches the installed libraries: run "
        "`make field-tables` (python -m tools.field_tables) and commit it"
    )
    assert shipped == read_library_fields(class_name)


def test_a_table_of_other_versions_is_not_used(tmp_path, monkeypatch):
    recorded = json.loads(field_tables.shipped_path("LoraConfig").read_text())
    recorded["versions"]["peft"] = "0.0.1"
    (tmp_path / "LoraConfig.json").write_text(json.dumps(recorded))
    monkeypatch.setattr(field_tables, "SHIPPED", tmp_path)
    assert field_tables.shipped_fields("LoraConfig") is None


def test_checking_a_recipe_on_an_empty_cache_imports_no_trl(tmp_path):
    code = (
        "import sys\n"
        "from recipe_engine.config.compose import compose_config, to_engine_config\n"
        "from recipe_engine.plan.planner import check_recipe\n"
        "for recipe in ('r3-two-stage', 'r5-sft-dpo-text', 'r1-llm-only'):\n"
        "    check_recipe(to_engine_config(compose_config([f'recipe={recipe}'])))\n"
        "print(sorted(m for m in ('trl', 'peft', 'torch') if m in sys.modules))\n"
    )
    env = {**__import__("os").environ, "RECIPE_ENGINE_CACHE": str(tmp_path / "empty")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert not (tmp_path / "empty" / "fields").exists()  # nothing read, so nothing cached
