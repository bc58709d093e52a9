"""The run verb's end-of-run compare: whether the run that just finished is measured, and the
measuring itself (the base and every stage on the held-out rows the run read, written as
`compare`'s records by `evaluate.scoring`). `report.compare` renders the records.

Importing this loads no model library: `score_after_run` imports the measuring when called.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.run.recipe import StageResult

if TYPE_CHECKING:
    from recipe_engine.evaluate.records import Scored


def compare_skipped(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str | None:
    """Why the end-of-run compare is not measured, as the line to print ("": nothing to say);
    None when it is measured."""
    settings = plan.config.eval
    if not (results and settings.enabled and settings.compare):
        return ""
    probed = probed_stage(plan, results)
    if probed is not None and not probed.data.eval_rows:  # too few rows, or eval_fraction=0
        return "compare: skipped, the first stage's data holds no rows out to ask (see `plan`)"
    if all(r.status == "cached" for r in results):
        return f"all stages cached; to compare them: python -m recipe_engine compare run={run_dir}"
    return None


def score_after_run(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> Scored:
    """The base and every stage of the run measured with the run's eval settings and seed, on
    the held-out rows it read (not read again), written as `compare`'s records."""
    from recipe_engine.evaluate.scoring import score_run

    probed = probed_stage(plan, results)
    return score_run(
        run_dir,
        settings=dataclasses.asdict(plan.config.eval),
        seed=plan.config.seed,
        held_out=probed.data.splits().eval if probed else None,
    )


def probed_stage(plan: RecipePlan, results: list[StageResult]) -> StagePlan | None:
    """The stage whose held-out rows `compare` probes with (its root), rows the run read;
    None when the run only evaluated (`compare` reads the root's manifest)."""
    stages = [plan.stages[r.name] for r in results if not plan.stages[r.name].evaluate_only]
    return next((s for s in stages if s.parent is None), stages[0] if stages else None)
