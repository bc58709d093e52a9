"""What preference training is judged by, rendered: the held-out pairs' reward accuracy
(against the base), pair accuracy and win rate of every model, in a run's comparison and in a
recipe-vs-recipe experiment, with one answer line on the reward accuracy.

The reward accuracy of two recipes differs beyond the noise when the 95% interval of the
difference excludes zero (`report.significance`, the pairs as the samples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recipe_engine.report.experiment import RecipeRun
from recipe_engine.report.significance import Accuracies, difference
from recipe_engine.tables import markdown_table, text_table

PAIR_COLUMNS = (
    "model",
    "pairs",
    "reward acc (vs base)",
    "log-ratio margin",
    "pair acc",
    "win rate",
)
RULE = (
    "reward: log p(answer | prompt) - log p_base(answer | prompt); reward acc: share of pairs "
    "where the chosen answer's reward beats the rejected one's; pair acc: chosen more likely "
    "than rejected; win rate: greedy answer = chosen (1), = rejected (0), neither (1/2)"
)


def pair_rows(judged: Mapping[str, Mapping[str, Any] | None]) -> list[list[str]]:
    """One row per model judged on the pairs (a model without them is left out)."""
    rows = []
    for name, values in judged.items():
        if not values:
            continue
        rows.append(
            [
                name,
                str(values.get("pairs", "-")),
                _percent(values.get("reward_accuracy")),
                _number(values.get("logratio_margin")),
                _percent(values.get("pair_accuracy")),
                _percent(values.get("win_rate")),
            ]
        )
    return rows


def pair_table(judged: Mapping[str, Mapping[str, Any] | None], markdown: bool = False) -> list[str]:
    rows = pair_rows(judged)
    if not rows:
        return []
    if markdown:
        return markdown_table(rows, header=PAIR_COLUMNS)
    return text_table(rows, header=PAIR_COLUMNS)


def experiment_pairs(runs: Sequence[RecipeRun]) -> dict[str, dict[str, Any] | None]:
    """The base and each recipe's final stage on the pairs (the first seed of each recipe)."""
    judged: dict[str, dict[str, Any] | None] = {}
    for run in runs:
        if run.base_preference is not None:
            judged.setdefault("base", run.base_preference)
        judged.setdefault(f"{run.recipe} ({run.final_stage})", run.preference)
    return judged


def preference_answer(runs: Sequence[RecipeRun]) -> str | None:
    """One line: which recipe's final stage has the higher held-out reward accuracy, and
    whether the difference is beyond the noise; None when no recipe was judged on pairs."""
    judged = [run for run in runs if run.preference and "reward_accuracy" in run.preference]
    recipes = list(dict.fromkeys(run.recipe for run in judged))
    if len(recipes) < 2:
        return None
    per_recipe = {r: [run for run in judged if run.recipe == r] for r in recipes}
    accuracies = {r: _accuracies(found) for r, found in per_recipe.items()}
    best = max(recipes, key=lambda r: accuracies[r].mean)
    parts = []
    for other in recipes:
        if other == best:
            continue
        found = difference(accuracies[best], accuracies[other])
        where = "beyond the noise" if found.significant else "within the noise"
        parts.append(f"{best} vs {other}: {found.points()} ({where})")
    pairs = accuracies[best].probes
    return (
        f"answer on preference pairs: {best} has the higher held-out reward accuracy against "
        f"the base over {pairs} pairs; " + "; ".join(parts)
    )


def _accuracies(runs: Sequence[RecipeRun]) -> Accuracies:
    values = tuple(float(run.preference["reward_accuracy"]) for run in runs if run.preference)
    pairs = int(next(run.preference["pairs"] for run in runs if run.preference))
    return Accuracies(values, pairs)


def _percent(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"
