"""What preference training is judged by, rendered: every model's metrics on the held-out judged
rows, in a run's comparison and in a recipe-vs-recipe experiment, with one answer line on the
headline metric. Judged rows are preference pairs (DPO, ORPO: reward accuracy against the base,
pair accuracy, win rate) or unpaired feedback (KTO: label accuracy against the base, the log-ratio
of each label, the greedy answers' matches); `TABLES` says how each is shown.

Two recipes differ beyond the noise when the 95% interval of the difference of the headline
metric excludes zero (`report.significance`, the rows as the samples).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recipe_engine.report.experiment import JudgedMetrics, RecipeRun
from recipe_engine.report.significance import Accuracies, difference
from recipe_engine.tables import markdown_table, text_table
from recipe_engine.trainers.kind import PREFERENCE_ROWS, UNPAIRED_ROWS

Judged = Mapping[str, JudgedMetrics | None]  # model -> its metrics on the judged rows (or None)


@dataclass(frozen=True)
class JudgedTable:
    """How one kind of judged rows is shown: its section, columns, rule and answer line."""

    title: str  # the section's name: "preference pairs"
    columns: tuple[str, ...]
    cells: Callable[[JudgedMetrics], list[str]]  # one model's metrics -> its cells
    rule: str  # how the metrics are computed, in words
    headline: str  # the metric the answer line compares recipes by
    headline_words: str  # ... as the answer line names it
    count: str  # the key holding how many rows were judged
    unit: str  # what those rows are called


def _percent(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


TABLES = {
    PREFERENCE_ROWS: JudgedTable(
        title="preference pairs",
        columns=(
            "model",
            "pairs",
            "reward acc (vs base)",
            "log-ratio margin",
            "pair acc",
            "win rate",
        ),
        cells=lambda v: [
            str(v.get("pairs", "-")),
            _percent(v.get("reward_accuracy")),
            _number(v.get("logratio_margin")),
            _percent(v.get("pair_accuracy")),
            _percent(v.get("win_rate")),
        ],
        rule="reward: log p(answer | prompt) - log p_base(answer | prompt); reward acc: share of "
        "pairs where the chosen answer's reward beats the rejected one's; pair acc: chosen more "
        "likely than rejected; win rate: greedy answer = chosen (1), = rejected (0), neither (1/2)",
        headline="reward_accuracy",
        headline_words="held-out reward accuracy",
        count="pairs",
        unit="pairs",
    ),
    UNPAIRED_ROWS: JudgedTable(
        title="unpaired feedback",
        columns=(
            "model",
            "rows",
            "label acc (vs base)",
            "rank acc (vs base)",
            "log-ratio margin",
            "desirable exact",
            "undesirable given",
        ),
        cells=lambda v: [
            str(v.get("rows", "-")),
            _percent(v.get("label_accuracy")),
            _percent(v.get("ranking_accuracy")),
            _number(v.get("logratio_margin")),
            _percent(v.get("desirable_match")),
            _percent(v.get("undesirable_match")),
        ],
        rule="log-ratio: log p(completion | prompt) - log p_base(completion | prompt); label acc: "
        "share of rows whose log-ratio has the label's sign (desirable above 0, undesirable "
        "below); rank acc: share of (desirable, undesirable) row pairs where the desirable "
        "log-ratio is higher; log-ratio margin: mean desirable minus mean undesirable; "
        "desirable exact: greedy answer = the desirable completion, over those rows; "
        "undesirable given: greedy answer = the undesirable completion, over those rows",
        headline="label_accuracy",
        headline_words="held-out label accuracy",
        count="rows",
        unit="rows",
    ),
}


def table_for(judged: Judged) -> JudgedTable | None:
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
    (reward accuracy on pairs, label accuracy on unpaired feedback), and whether the difference
    is beyond the noise; None when fewer than two recipes were judged."""
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


def _accuracies(runs: Sequence[RecipeRun], table: JudgedTable) -> Accuracies:
    values = tuple(float(run.preference[table.headline]) for run in runs if run.preference)
    count = int(next(run.preference[table.count] for run in runs if run.preference))
    return Accuracies(values, count)
