"""What preference training is judged by, rendered: every model's metrics on the held-out judged
rows, in a run's comparison and in a recipe-vs-recipe experiment, with one answer line on the
headline metric. Judged rows are preference pairs (DPO, ORPO) or unpaired feedback (KTO);
`capabilities.judged` names each one's metrics and says how they are shown.

Two recipes differ beyond the noise when the 95% interval of the difference of the headline
metric excludes zero (`report.significance`, the rows as the samples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recipe_engine.capabilities.judged import PAIRS, UNPAIRED, JudgedView
from recipe_engine.report.experiment import JudgedMetrics, RecipeRun
from recipe_engine.report.significance import Accuracies, difference
from recipe_engine.tables import markdown_table, text_table
from recipe_engine.trainers.kind import PREFERENCE_ROWS, UNPAIRED_ROWS

Judged = Mapping[str, JudgedMetrics | None]  # model -> its metrics on the judged rows (or None)


TABLES = {PREFERENCE_ROWS: PAIRS, UNPAIRED_ROWS: UNPAIRED}


def table_for(judged: Judged) -> JudgedView | None:
    """The table of the judged rows' kind (records older than KTO hold pairs), None if none."""
    found = next((values for values in judged.values() if values), None)
    return TABLES[found.get("judged", PREFERENCE_ROWS)] if found else None


def judged_rows(judged: Judged) -> list[list[str]]:
    """One row per model judged (a model without the rows is left out)."""
    table = table_for(judged)
    if table is None:
        return []
    return [[name, *table.cells(values)] for name, values in judged.items() if values]


def judged_table(judged: Judged, markdown: bool = False) -> list[str]:
    table = table_for(judged)
    if table is None:
        return []
    render = markdown_table if markdown else text_table
    return render(judged_rows(judged), header=table.columns)


def experiment_judged(runs: Sequence[RecipeRun]) -> Judged:
    """The base and each recipe's final stage on the judged rows (each recipe's first seed)."""
    judged: dict[str, JudgedMetrics | None] = {}
    for run in runs:
        if run.base_preference is not None:
            judged.setdefault("base", run.base_preference)
        judged.setdefault(f"{run.recipe} ({run.final_stage})", run.preference)
    return judged


def preference_answer(runs: Sequence[RecipeRun]) -> str | None:
    """One line: which recipe's final stage has the higher headline metric on the judged rows
    (`capabilities.judged`), and whether the difference is beyond the noise; None when fewer
    than two recipes were judged."""
    table = table_for({run.recipe: run.preference for run in runs})
    if table is None:
        return None
    judged = [run for run in runs if run.preference and table.headline in run.preference]
    recipes = list(dict.fromkeys(run.recipe for run in judged))
    if len(recipes) < 2:
        return None
    per_recipe = {r: [run for run in judged if run.recipe == r] for r in recipes}
    accuracies = {r: _accuracies(found, table) for r, found in per_recipe.items()}
    best = max(recipes, key=lambda r: accuracies[r].mean)
    parts = []
    for other in recipes:
        if other == best:
            continue
        found = difference(accuracies[best], accuracies[other])
        where = "beyond the noise" if found.significant else "within the noise"
        parts.append(f"{best} vs {other}: {found.points()} ({where})")
    return (
        f"answer on {table.title}: {best} has the higher {table.headline_words} against the "
        f"base over {accuracies[best].probes} {table.unit}; " + "; ".join(parts)
    )


def _accuracies(runs: Sequence[RecipeRun], table: JudgedView) -> Accuracies:
    values = tuple(float(run.preference[table.headline]) for run in runs if run.preference)
    count = int(next(run.preference[table.count] for run in runs if run.preference))
    return Accuracies(values, count)
