"""Judged rows in a comparison: the held-out rows of a run's preference stage (pairs for DPO /
ORPO, unpaired feedback for KTO), asked of the base and of every stage, and judged by one rule
(`run.preference_scores`).

Every model's log-probabilities of the judged answers are measured while it is loaded (one
model in memory at a time), or read from the pass the run made of it (`run.measuring`);
rewards are judged against the base once all are in, so an SFT stage and the preference stage
trained from it get comparable reward metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from recipe_engine.resolve.converters import TrlRow
from recipe_engine.run.measuring import measure_judged
from recipe_engine.run.preference_scores import LogPs, judging
from recipe_engine.store.records import Manifest
from recipe_engine.store.scores import (
    Generation,
    JudgedAnswers,
    JudgedScores,
    ModelMetrics,
    Stage,
)
from recipe_engine.trainers import trainer_of

log = logging.getLogger("recipe_engine")


def is_preference_stage(manifest: Manifest) -> bool:
    """The stage learns from judged rows (pairs, or labelled completions), not from
    demonstrations."""
    return trainer_of(manifest.config).judged


def preference_rows(stages: Sequence[Stage], seed: int, limit: int | None) -> list[TrlRow] | None:
    """The held-out rows of the run's last preference stage (at most `limit`); None when no
    stage trains on judged rows, or it holds none out."""
    from recipe_engine.resolve.data import data_config, load_splits

    preference = [manifest for _, _, manifest in stages if is_preference_stage(manifest)]
    if not preference:
        return None
    manifest = preference[-1]
    splits = load_splits(data_config(manifest.data), kind=manifest.kind, seed=seed)
    if splits.eval is None:
        return None
    rows = splits.eval if limit is None else splits.eval.select(range(min(limit, len(splits.eval))))
    return [dict(row) for row in rows]


class PreferenceJudge:
    """Takes each model's answers to the judged rows as they come (`add`, or `measure` a
    loaded model), then adds every model's preference metrics to the comparison's (`judge`),
    rewards against the first (the base)."""

    def __init__(self, rows: list[TrlRow] | None, generation: Generation) -> None:
        self.rows, self.generation = rows, generation
        self.rule = judging(rows or [])
        self.logps: dict[str, LogPs] = {}
        self.greedy: dict[str, dict[str, float]] = {}

    def measure(self, name: str, model: Any, processor: Any) -> None:
        if not self.rows or self.rule is None:
            return
        log.info("compare: %s on %d %s row(s)", name, len(self.rows), self.rule.rows)
        self.add(name, measure_judged(model, processor, self.rows, self.generation))

    def add(self, name: str, judged: JudgedAnswers | None) -> None:
        """A model's log-probabilities and greedy answers on the judged rows."""
        if not self.rows or self.rule is None or judged is None:
            return
        self.logps[name] = judged.logps
        self.greedy[name] = self.rule.greedy(judged.answers, self.rows)

    def scores(self) -> dict[str, JudgedScores]:
        """Every model measured, judged: rewards against the first (the base)."""
        rule, rows = self.rule, self.rows
        if not self.logps or rule is None or rows is None:
            return {}
        base = next(iter(self.logps))
        judged = {}
        for name, logps in self.logps.items():
            reference = None if name == base else self.logps[base]
            values = rule.against_reference(logps, reference, rows) | self.greedy[name]
            judged[name] = JudgedScores(rule.rows, values, len(logps), rule.count)
        return judged

    def judge(self, metrics: Mapping[str, ModelMetrics]) -> None:
        """Each model's judged rows' metrics added to its comparison metrics."""
        for name, scores in self.scores().items():
            if name in metrics:
                metrics[name].preference = scores
