"""Recipes side by side: each recipe's final stage and the shared base on the same probes.

`recipe-engine compare recipes=[A,B] [seeds=[0,1,2]]` trains or reuses every recipe (per seed)
and hands this module one `RecipeRun` per (recipe, seed): the scores of its final stage and of
the base, read from the stages' own stored evaluations where those were made with the
experiment's evaluation settings (`stored_score`), else measured by the caller. This module
aggregates over seeds (mean and min..max), renders the table and the one-line answer, and
writes experiment.md / experiment.csv / bar charts. It imports no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import EvalConfig
from recipe_engine.report.significance import (
    METHOD,
    PROBES_ONLY,
    Accuracies,
    Difference,
    difference,
)
from recipe_engine.store.records import Manifest, Platform
from recipe_engine.tables import text_table

BASE = "base"
METRICS = {  # metric -> (title, higher is better)
    "exact_match": ("Held-out exact match", True),
    "contains": ("Held-out contains (reference in answer)", True),
    "eval_loss": ("Held-out eval loss (lower is better)", False),
}
ANSWER_METRIC = "exact_match"
# EvalConfig switches that decide whether an evaluation runs, not what it measures.
EVAL_SWITCHES = ("enabled", "compare")
COLUMNS = (
    "recipe",
    "final stage",
    "exact match",
    "contains",
    "eval loss",
    "trained",
    "steps",
    "wall s",
    "peak GiB",
)


# One model's metrics on the held-out judged rows, as `run.preference_scores` records them
# (the manifest's JSON): pairs or rows, the accuracies, the kind of rows judged.
JudgedMetrics = Mapping[str, Any]


@dataclass(frozen=True)
class Score:
    """One model's held-out metrics and the base precision it was measured on."""

    exact_match: float | None
    contains: float | None
    eval_loss: float | None
    samples: int | None
    precision: str = "full"  # "full" | "4-bit" | "8-bit"
    source: str = "stored"  # "stored": the stage's own evaluation; "evaluated": measured now


@dataclass
class RecipeRun:
    """One recipe trained (or reused) with one seed: its final stage's score and its costs."""

    recipe: str
    seed: int
    run_dir: Path
    final_stage: str
    score: Score | None
    base: Score | None  # the untrained base on the same probes
    trained: str  # "vision: vision_tower, projector; llm: lm_head"
    steps: int
    wall_s: float  # training wall time of all its stages, as recorded when they trained
    peak_gib: float | None  # the largest measured peak of its stages
    memory_measure: str | None = None
    platforms: list[Platform | None] = field(default_factory=list)  # where its stages ran
    # Stages this run reused from the store: their wall time is the one recorded when they
    # trained in an earlier run, and the table says so.
    cached: list[str] = field(default_factory=list)
    stages: int = 1  # how many stages the recipe has
    # The final stage's and the base's metrics on the experiment's held-out judged rows, pairs
    # or unpaired feedback (run.preference_scores; None: no recipe has a preference stage).
    preference: JudgedMetrics | None = None
    base_preference: JudgedMetrics | None = None


@dataclass(frozen=True)
class Spread:
    """A metric over seeds: mean and min..max."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread | None:
        known = [float(v) for v in values if v is not None]
        if not known or len(known) < len(values):
            return None  # a seed without the metric: no fair mean
        return cls(statistics.fmean(known), min(known), max(known), len(known))


@dataclass
class RecipeSummary:
    """A recipe's row of the table: its runs aggregated over seeds."""

    recipe: str
    final_stage: str
    seeds: list[int]
    metrics: dict[str, Spread | None]
    precision: str
    trained: str = "-"
    steps: Spread | None = None
    wall_s: Spread | None = None
    peak_gib: float | None = None
    runs: list[RecipeRun] = field(default_factory=list)


# --------------------------------------------------------------------------- stored scores


def measurement(settings: EvalConfig) -> list[tuple[str, Any]]:
    """The evaluation settings that decide what is measured (generation, row cap), by name,
    in EvalConfig's order."""
    return [(k, v) for k, v in asdict(settings).items() if k not in EVAL_SWITCHES]


def stored_score(manifest: Manifest, settings: EvalConfig) -> Score | None:
    """The stage's own held-out evaluation, when it was made with these settings (the probes
    are the stage's held-out rows: its key fixes data and seed); None when it must be made."""
    metrics = manifest.metrics
    if not _same_measurement(manifest, settings) or metrics.evaluation_error:
        return None
    if metrics.eval_accuracy is None or metrics.eval_contains is None:
        return None
    return Score(
        metrics.eval_accuracy,
        metrics.eval_contains,
        metrics.eval_loss,
        metrics.eval_samples,
        precision=manifest.base_precision,
    )


def stored_base_score(root: Manifest, settings: EvalConfig) -> Score | None:
    """The untrained base as the root stage measured it (full precision, no eval loss)."""
    metrics = root.metrics
    if not _same_measurement(root, settings) or metrics.base_accuracy is None:
        return None
    if metrics.base_contains is None:
        return None
    return Score(metrics.base_accuracy, metrics.base_contains, None, metrics.eval_samples)


def _same_measurement(manifest: Manifest, settings: EvalConfig) -> bool:
    """The manifest recorded every setting that decides what is measured, with these values
    (one an older engine did not record reads as different)."""
    recorded = manifest.eval_settings
    if recorded is None:
        return False
    measured = {k: v for k, v in recorded.items() if k not in EVAL_SWITCHES}
    return measured == dict(measurement(settings))


# --------------------------------------------------------------------------- aggregation


def summarize(runs: Sequence[RecipeRun]) -> list[RecipeSummary]:
    """One summary per recipe, in the order the recipes were given."""
    recipes = list(dict.fromkeys(run.recipe for run in runs))
    return [_summary(name, [r for r in runs if r.recipe == name]) for name in recipes]


def _summary(recipe: str, runs: list[RecipeRun]) -> RecipeSummary:
    scores = [run.score for run in runs]
    peaks = [run.peak_gib for run in runs if run.peak_gib is not None]
    return RecipeSummary(
        recipe=recipe,
        final_stage=runs[0].final_stage,
        seeds=[run.seed for run in runs],
        metrics=_metric_spreads(scores),
        precision=_precision(scores),
        trained=runs[0].trained,
        steps=Spread.of([run.steps for run in runs]),
        wall_s=Spread.of([run.wall_s for run in runs]),
        peak_gib=max(peaks) if peaks else None,
        runs=list(runs),
    )


def base_per_seed(runs: Sequence[RecipeRun]) -> dict[int, tuple[RecipeRun, Score]]:
    """The base's score per seed, from the first recipe run that measured it."""
    found: dict[int, tuple[RecipeRun, Score]] = {}
    for run in runs:
        if run.base is not None:
            found.setdefault(run.seed, (run, run.base))
    return found


def base_summary(runs: Sequence[RecipeRun]) -> RecipeSummary | None:
    """The shared base, once per seed (every recipe measured it on the same probes)."""
    per_seed = base_per_seed(runs)
    if not per_seed:
        return None
    seeds = sorted({run.seed for run in runs})
    scores = [per_seed[seed][1] if seed in per_seed else None for seed in seeds]
    return RecipeSummary(BASE, "-", seeds, _metric_spreads(scores), _precision(scores))


def _metric_spreads(scores: Sequence[Score | None]) -> dict[str, Spread | None]:
    return {m: Spread.of([getattr(s, m) if s else None for s in scores]) for m in METRICS}


def _precision(scores: Sequence[Score | None]) -> str:
    found = list(dict.fromkeys(s.precision for s in scores if s is not None))
    return "/".join(found) or "-"


# --------------------------------------------------------------------------- the answer


def answer_line(summaries: Sequence[RecipeSummary]) -> str:
    """One line: which recipes lead on held-out exact match and which they beat, where "beat"
    means the 95% interval of the difference excludes zero (`report.significance`: seed and
    probe noise; with one seed, probe noise only, and the line says so). Recipes are named in
    the order given, and no measured value is quoted, so the verdict is what repeats."""
    title = "held-out exact match"
    missing = [s.recipe for s in summaries if s.metrics[ANSWER_METRIC] is None]
    if missing:
        return f"answer: cannot tell: no {title} for {', '.join(missing)} (no evaluation)"
    best = max(summaries, key=_mean)  # the first of equal means
    beaten = [s for s in summaries if s is not best and _difference(best, s).significant]
    leaders = [s for s in summaries if s not in beaten]
    if len(leaders) == 1:
        verdict = f"{best.recipe} beats {_names(beaten)} on {title}"
    elif not beaten and len({_mean(s) for s in summaries}) == 1:
        verdict = f"no difference between {_names(leaders)} on {title}"
    else:
        verdict = f"{_names(leaders)} are level on {title}"
        verdict += f", and beat {_names(beaten)}" if beaten else ""
    return f"answer: {verdict} ({_answer_detail(summaries)})"


def _names(summaries: Sequence[RecipeSummary]) -> str:
    """ "a", "a and b", "a, b and c"."""
    names = [s.recipe for s in summaries]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _accuracies(summary: RecipeSummary) -> Accuracies:
    per_seed = tuple(run.score.exact_match for run in summary.runs if run.score)
    return Accuracies(tuple(v for v in per_seed if v is not None), _samples(summary) or 0)


def _difference(best: RecipeSummary, other: RecipeSummary) -> Difference:
    return difference(_accuracies(best), _accuracies(other))


def _samples(summary: RecipeSummary) -> int | None:
    scores = [run.score for run in summary.runs if run.score is not None]
    return scores[0].samples if scores else None


def _mean(summary: RecipeSummary) -> float:
    spread = summary.metrics[ANSWER_METRIC]
    return spread.mean if spread else float("nan")


def _answer_detail(summaries: Sequence[RecipeSummary]) -> str:
    """How many seeds and which noise the verdict accounts for, and the base precisions
    when the recipes' final stages were measured on different ones."""
    seeds = min(len(s.seeds) for s in summaries)
    if seeds < 2:
        detail = (
            "1 seed: beyond probe noise only, training noise unmeasured; seeds=[0,1,2] measures it"
        )
    else:
        detail = f"{seeds} seeds: 95% intervals of the differences, seed and probe noise"
    precisions = [s.precision for s in summaries]
    if len(set(precisions)) > 1:
        detail += "; measured on " + " vs ".join(precisions) + " base"
    return detail


def differences_sentence(summaries: Sequence[RecipeSummary]) -> str:
    """Each recipe against the best: the difference with its 95% interval, and the method."""
    scored = [s for s in summaries if s.metrics[ANSWER_METRIC] is not None]
    if len(scored) < 2:
        return "Differences: fewer than two recipes were scored."
    best = max(scored, key=_mean)
    found = [(other, _difference(best, other)) for other in scored if other is not best]
    parts = [
        f"{best.recipe} vs {other.recipe}: {d.points()}"
        + (" (beyond the noise)." if d.significant else " (within the noise).")
        for other, d in found
    ]
    method = METHOD if all(d.training_measured for _, d in found) else PROBES_ONLY
    return f"Differences in held-out exact match ({method}): " + " ".join(parts)


# --------------------------------------------------------------------------- the table


def table_rows(summaries: Sequence[RecipeSummary], base: RecipeSummary | None) -> list[list[str]]:
    """The base first, then one row per recipe (cells as the report prints them)."""
    rows = [_row(base)] if base is not None else []
    return rows + [_row(summary) for summary in summaries]


def _row(summary: RecipeSummary) -> list[str]:
    metrics = summary.metrics
    label = "" if summary.precision in ("full", "-") else f" ({summary.precision} base)"
    accuracy = _cell(metrics["exact_match"], True)
    loss = _cell(metrics["eval_loss"], False)  # measured on the same base as the accuracy
    return [
        summary.recipe,
        summary.final_stage,
        accuracy + (label if accuracy != "-" else ""),
        _cell(metrics["contains"], True),
        loss + (label if loss != "-" else ""),
        summary.trained,
        _cell(summary.steps, None),
        _cell(summary.wall_s, None) + _cached_label(summary.runs),
        "-" if summary.peak_gib is None else f"{summary.peak_gib:.3f}",
    ]


def _cached_label(runs: Sequence[RecipeRun]) -> str:
    """ " (cached)" when every stage's wall time was reused from the store, " (cached: vision)"
    when some were, " (cached in some seeds)" when seeds differ; "" when all trained now."""
    labels = set()
    for run in runs:
        if len(run.cached) >= run.stages:
            labels.add(" (cached)")
        elif run.cached:
            labels.add(f" (cached: {', '.join(run.cached)})")
        else:
            labels.add("")
    if len(labels) > 1:
        return " (cached in some seeds)"
    return labels.pop() if labels else ""


def _cell(spread: Spread | None, percent: bool | None) -> str:
    """ "92%", or "92% [88..96%]" over several seeds; `percent=None`: a plain count."""
    if spread is None:
        return "-"
    text = _number(spread.mean, percent)
    if spread.n < 2 or spread.low == spread.high:
        return text
    return f"{text} [{_range(spread, percent)}]"


def _range(spread: Spread, percent: bool | None) -> str:
    if percent:
        return f"{spread.low * 100:.0f}..{spread.high:.0%}"
    return f"{_number(spread.low, percent)}..{_number(spread.high, percent)}"


def _number(value: float, percent: bool | None) -> str:
    if percent:
        return f"{value:.0%}"
    return f"{value:.3f}" if percent is False else f"{value:.1f}".removesuffix(".0")


def experiment_table(summaries: Sequence[RecipeSummary], base: RecipeSummary | None) -> str:
    """The plain-text table the command prints."""
    return "\n".join(text_table(table_rows(summaries, base), header=COLUMNS))
