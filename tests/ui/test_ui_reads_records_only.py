"""`ui` reads records only: importing every ui module loads no torch, model or data library
(the import contract in pyproject.toml checks ui's own imports; this checks what importing
them pulls in, in a fresh process), and neither `run` nor `evaluate`."""

from __future__ import annotations

from fresh_imports import MODEL_LIBRARIES, loaded_after_importing, package_modules

import recipe_engine.ui


def test_every_ui_module_is_found():
    assert {"recipe_engine.ui.app", "recipe_engine.ui.runs", "recipe_engine.ui.server"} <= set(
        package_modules(recipe_engine.ui)
    )


def test_importing_every_ui_module_loads_no_torch_nor_run_nor_evaluate():
    watched = (*MODEL_LIBRARIES, "recipe_engine.run.", "recipe_engine.evaluate.")
    assert loaded_after_importing(package_modules(recipe_engine.ui), watched) == []
