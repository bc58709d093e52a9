"""The embedded default (r3 on the tiny Qwen2-VL and the shapes data), trained in full: each
stage does what it is for, and the final stage learned colours and shapes, not its generator."""

from __future__ import annotations

from pathlib import Path

import pytest
from independent_shapes import write_probes

from recipe_engine.config.compose import compose_config
from recipe_engine.evaluate.comparison import compare_run
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import StageResult, run_recipe

CHANCE = 1 / 12  # four colours x three shapes


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, StageResult]]:
    root = tmp_path_factory.mktemp("default")
    run_dir = root / "runs" / "r3-two-stage" / "t1"
    plan = plan_from_config(compose_config([f"output_root={root}"]))
    results = run_recipe(plan, run_dir)
    return run_dir, {result.name: result for result in results}


def _accuracy(result: StageResult) -> float:
    assert result.manifest is not None
    accuracy = result.manifest.metrics.eval_accuracy
    assert accuracy is not None, result.name
    return accuracy


def test_the_untrained_base_answers_at_chance(default_run):
    _, stages = default_run
    base = stages["vision"].manifest.metrics.base_accuracy
    assert base is not None and base < 3 * CHANCE


def test_the_vision_stage_alone_lifts_held_out_accuracy_well_above_chance(default_run):
    """The language model is frozen in that stage: the lift shows it reads what the vision
    tower learned (the tiny base's language model is pre-trained, as a real VLM's is)."""
    _, stages = default_run
    assert _accuracy(stages["vision"]) >= 0.75


def test_the_final_stage_scores_pictures_from_an_independent_generator(default_run, tmp_path):
    run_dir, stages = default_run
    assert _accuracy(stages["llm"]) >= 0.85  # the embedded generator's held-out split
    probes = write_probes(tmp_path / "independent", per_class=10, seed=7)
    compared = compare_run(run_dir, probes=probes)
    assert len(compared.measured.probes) == 120
    metrics = compared.metrics
    assert metrics["base"].task.exact_match < 3 * CHANCE
    assert metrics["llm"].task.exact_match >= 0.85, metrics
