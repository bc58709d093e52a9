"""The evaluation-only stage (`evaluate_only: true`): generate on the held-out rows of the
model it starts from, and store the predictions and metrics as a stage output, cached like
any stage. Rank 0 alone generates."""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from typing import Any

from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.run import evaluation
from recipe_engine.run.loading import (
    Weights,
    load_stage_model,
    load_stage_processor,
    merge_parent,
)
from recipe_engine.run.memory_peak import free_memory
from recipe_engine.run.stage_manifest import manifest_versions, stage_identity, stage_platform
from recipe_engine.store.records import EVALUATION, Manifest, StageMetrics
from recipe_engine.store.stage_records import Handoff
from recipe_engine.store.store import Store, relative_in_store


class EvaluationRecipe:
    """An evaluation stage: generate on the held-out rows, store predictions and metrics."""

    def __init__(self, plan: RecipePlan, stage: StagePlan, store: Store) -> None:
        self.plan, self.stage, self.store = plan, stage, store

    def run(self) -> Manifest | None:
        if not is_main_process():  # generation is per-process work; rank 0 does it once
            return None
        started = time.time()
        weights = merge_parent(self.plan, self.stage, self.store)
        model = load_stage_model(self.stage, weights, None)
        processor = load_stage_processor(self.stage, weights)
        result = exact_match_on_held_out(self.plan, self.stage, model, processor)
        final = self.store.make_work_dir(self.stage.fingerprint) / "final"
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir(parents=True)
        evaluation.write_predictions(final, result.predictions)
        manifest = self._manifest(weights, result, time.time() - started)
        manifest.save(final)
        self.store.commit(self.stage.fingerprint, final)
        shutil.rmtree(self.store.work_dir(self.stage.fingerprint), ignore_errors=True)
        del model, processor
        free_memory()
        return manifest

    def _manifest(
        self, weights: Weights, result: evaluation.HeldOutAnswers, seconds: float
    ) -> Manifest:
        metrics = StageMetrics(
            eval_accuracy=result.accuracy,
            eval_contains=result.contains,
            eval_samples=len(result.predictions),
        )
        here = stage_platform(self.stage)
        return Manifest(
            **asdict(stage_identity(self.plan, self.stage)),
            format=EVALUATION,
            model_entry=asdict(self.stage.model),
            dtype=self.stage.dtype,
            base_location=relative_in_store(weights.location, self.store),
            config=asdict(self.stage.config),
            data=asdict(self.stage.data.config),
            eval_settings=asdict(self.plan.config.eval),
            handoff=Handoff(merge_check=weights.merge_check),
            metrics=metrics,
            timings={"total_s": seconds},
            platform=here,
            versions=manifest_versions(here),
        )


def exact_match_on_held_out(
    plan: RecipePlan, stage: StagePlan, model: Any, processor: Any
) -> evaluation.HeldOutAnswers:
    """Exact match on the stage's held-out rows, generated with the run's eval settings."""
    settings = plan.config.eval
    rows = evaluation.capped(stage.data.splits().eval, settings.max_samples)
    generation = evaluation.generation_settings(settings, plan.config.seed)
    return evaluation.exact_match(model, processor, rows, generation)
