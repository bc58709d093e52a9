"""Judged rows across runs: the recipe-vs-recipe experiment judges every recipe's final stage
and the shared base on the same held-out rows (preference pairs, or unpaired feedback: those of
the recipe with a preference stage), so a recipe without a preference stage is judged by the
same rule.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe_engine.evaluate.preference_probes import PreferenceJudge, preference_rows
from recipe_engine.evaluate.probing import model_loaders, run_stages
from recipe_engine.resolve.converters import TrlRow
from recipe_engine.store.scores import Generation, JudgedScores

Rows = list[TrlRow]


def run_judged_rows(run_dir: Path, seed: int, limit: int | None) -> Rows | None:
    """The held-out judged rows of the run's last preference stage (None: it has none)."""
    return preference_rows(run_stages(run_dir), seed, limit)


def judge_on_rows(
    run_dir: Path, models: Sequence[str], rows: Rows, settings: Mapping[str, Any], seed: int
) -> dict[str, JudgedScores]:
    """Preference metrics of some models of a run (the base first: rewards are judged against
    it) on `rows` (judged rows: preference pairs or unpaired feedback), generated with the eval
    `settings`; one model in memory at a time."""
    _, loaders = model_loaders(run_dir)
    judge = PreferenceJudge(rows, Generation.from_settings(settings, seed))
    for index, (name, load, _) in enumerate(loaders):
        if index == 0 or name in models:
            model, processor = load()
            judge.measure(name, model, processor)
            del model, processor
            gc.collect()
    return judge.scores()
