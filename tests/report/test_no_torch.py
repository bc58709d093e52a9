"""`report` renders records: importing every report module loads no torch, model or data
library (the measuring is `evaluate`'s, asked by the verbs; what report reads of it,
`store.scores`, is plain data). The import contract in pyproject.toml checks report's own
imports; this checks what importing them pulls in, in a fresh process."""

from __future__ import annotations

from fresh_imports import MODEL_LIBRARIES, loaded_after_importing, package_modules

import recipe_engine.report


def test_every_report_module_is_found():
    assert {"recipe_engine.report.compare", "recipe_engine.report.run_report"} <= set(
        package_modules(recipe_engine.report)
    )


def test_importing_every_report_module_loads_no_torch():
    modules = package_modules(recipe_engine.report)
    assert loaded_after_importing(modules, MODEL_LIBRARIES) == []
