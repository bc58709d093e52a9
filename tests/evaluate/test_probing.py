"""`evaluate.probing`: the models a comparison asks, measured as each stage's trainer measures
them."""

from __future__ import annotations

import pytest

from recipe_engine.config.compare import EvalOverrides
from recipe_engine.config.compose import compose_config
from recipe_engine.evaluate.probing import RunOverrides
from recipe_engine.evaluate.scoring import score_run
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe


def test_eval_loss_is_the_runs_own_where_a_template_writes_past_the_answer(tmp_path):
    """Idefics3's template ends an assistant turn with `</s>` inside `{% generation %}` and a
    newline after it: the run's loss (TRL's assistant mask) leaves the newline out, and so does
    compare now (it once counted every token after the prompt: 4.79 against the run's 4.39).
    LoRA at full precision, so the two measure the very same model."""
    overrides = [
        "recipe=r1-llm-only",
        "model=tiny-idefics3",
        "stage.llm.quantization=null",
        f"output_root={tmp_path}",
        "++stage.llm.train.max_steps=2",
        "data.max_samples=16",
        "eval.max_samples=4",
    ]
    run_dir = tmp_path / "runs" / "r1-llm-only" / "t1"
    [stage] = run_recipe(plan_from_config(compose_config(overrides)), run_dir)
    metrics = score_run(
        run_dir, overrides=RunOverrides(settings=EvalOverrides.of(max_samples=4))
    ).measured.metrics
    recorded = stage.manifest.metrics.eval_loss
    assert metrics["llm"].eval_loss == pytest.approx(recorded, rel=1e-4)
    assert metrics["llm"].labels.run_loss == f"{recorded:.4f}"  # full precision
