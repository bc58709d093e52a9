"""Preference pairs in a comparison: the held-out pairs of a run's preference stage, asked of
the base and of every stage, and judged by one rule (`run.preference_scores`).

Every model's log-probabilities of the chosen and the rejected answers are measured while it
is loaded (one model in memory at a time); rewards are judged against the base once all are
in, so an SFT stage and the DPO stage trained from it get comparable reward accuracies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe_engine.config.trainers import TRAINERS
from recipe_engine.run.evaluation import Generation, generate_answers
from recipe_engine.run.preference_scores import LogPs, answer_logps, pair_metrics, win_rate
from recipe_engine.store.records import Manifest

log = logging.getLogger("recipe_engine")

Stage = tuple[str, Path, Manifest]


def is_preference_row(row: Mapping[str, Any]) -> bool:
    return "chosen" in row and "rejected" in row


def is_preference_stage(manifest: Manifest) -> bool:
    trainer = (manifest.config or {}).get("trainer", "sft")
    return trainer in TRAINERS and TRAINERS[trainer].preference


def preference_pairs(
    stages: Sequence[Stage], seed: int, limit: int | None
) -> list[dict[str, Any]] | None:
    """The held-out pairs of the run's last preference stage (at most `limit`); None when no
    stage trains on preference pairs, or it holds none out."""
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


class PairJudge:
    """Measures each model on the pairs as it comes (`measure`), then adds every model's
    preference metrics to the comparison's (`judge`), rewards against the first (the base)."""

    def __init__(
        self, pairs: list[dict[str, Any]] | None, kind: str, generation: Generation
    ) -> None:
        self.pairs, self.kind, self.generation = pairs, kind, generation
        self.logps: dict[str, LogPs] = {}
        self.wins: dict[str, float] = {}

    def measure(self, name: str, model: Any, processor: Any) -> None:
        if not self.pairs:
            return
        log.info("compare: %s on %d preference pair(s)", name, len(self.pairs))
        self.logps[name] = answer_logps(model, processor, self.pairs)
        answers = generate_answers(model, processor, self.pairs, self.kind, self.generation)
        self.wins[name] = win_rate(answers, self.pairs)

    def judge(self, metrics: dict[str, dict[str, Any]]) -> None:
        if not self.logps:
            return
        base, *stages = self.logps
        for name, logps in self.logps.items():
            reference = None if name == base else self.logps[base]
            values = pair_metrics(logps, reference)
            values["win_rate"] = self.wins[name]
            values["pairs"] = len(logps)
            if name in metrics:
                metrics[name]["preference"] = values
