"""`compare recipes=[A,B] [seeds=[0,1,2]] [probes=FILE]`: recipes side by side on one base and
one data set.

Every (recipe, seed) job is composed and planned first (`evaluate.experiment_jobs`), so bad
input writes nothing. Each job then runs exactly as the `run` verb runs it (the run layer's
Hydra job, its own run folder, stages reused from the store), without the per-run compare
report: the experiment needs only each recipe's final stage and the base, and takes their
scores from the stages' stored held-out evaluations where those used the experiment's settings,
measuring only what is missing. With `probes=FILE` every final stage and the base are measured
on the file's rows (read and checked before anything trains), as `compare run=... probes=FILE`
measures them. `report.experiment_report` writes and renders the result.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from recipe_engine.config.compare import CompareRequest
from recipe_engine.config.schema import EvalConfig
from recipe_engine.evaluate.after_run import finish_run
from recipe_engine.evaluate.experiment_jobs import (
    ExperimentRequest,
    Job,
    experiment_request,
    final_stage,
    override_stage,
    plan_jobs,
    root_stage,
)
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.report.diff import diff_recipes, render_diff
from recipe_engine.report.experiment import BASE, RecipeRun, Score, stored_base_score, stored_score
from recipe_engine.report.experiment_report import Experiment, write_experiment
from recipe_engine.run.hydra_job import run_composed
from recipe_engine.store.records import Manifest, RunSummary
from recipe_engine.store.scores import ModelMetrics
from recipe_engine.store.store import Store


def run_experiment(request: CompareRequest) -> int:
    """Plan every job, train or reuse each, then write and print the comparison; the exit code
    of the first job that did not finish, else 0."""
    asked = experiment_request(request)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    jobs = plan_jobs(asked, stamp)
    for job in jobs:
        # As the `run` verb runs it (without the MLflow artifacts it never logged here).
        code = finish_run(run_composed(job.composed, job.plan), artifacts=False)
        if code:
            print(f"error: recipe `{job.recipe}` did not finish: no comparison.", file=sys.stderr)
            return code
    runs = collect_all(jobs, asked.probes)
    root = Path(jobs[0].plan.config.output_root)
    folder = root / "experiments" / "-vs-".join(asked.recipes) / stamp
    probes = _probes_text(runs, asked.probes)
    experiment = Experiment(runs, _eval_config(jobs[0]), differences(asked, jobs), probes)
    print("\n" + "\n".join(write_experiment(folder, experiment).printed()))
    return 0


# --------------------------------------------------------------------------- scores


def collect_all(jobs: list[Job], probes: Path | None) -> list[RecipeRun]:
    """Every job's scores; on a probe file each model is measured now, the shared base once
    per seed (every recipe starts from it)."""
    if probes is None:
        runs = [collect(job) for job in jobs]
    else:
        first: dict[int, Job] = {}
        for job in jobs:
            first.setdefault(job.seed, job)
        runs = [collect(job, probes, base=first[job.seed] is job) for job in jobs]
    judge_preference(jobs, runs)
    return runs


def judge_preference(jobs: list[Job], runs: list[RecipeRun]) -> None:
    """Where a recipe has a preference stage, every recipe's final stage and the base are
    judged on its held-out judged rows (preference pairs, or unpaired feedback; rewards
    against the base), so the recipes compare by what preference training is judged by too."""
    from recipe_engine.evaluate.pair_judging import judge_on_rows, run_judged_rows

    settings = _eval_config(jobs[0])
    found = (run_judged_rows(job.run_dir, job.seed, settings.max_samples) for job in jobs)
    rows = next((r for r in found if r), None)
    if rows is None:
        return
    kind = "unpaired feedback row(s)" if "label" in rows[0] else "preference pair(s)"
    for job, run in zip(jobs, runs, strict=True):
        print(f"experiment: judging `{job.recipe}` on {len(rows)} {kind}")
        final = final_stage(job.plan)
        scores = judge_on_rows(job.run_dir, [final], rows, _eval_settings(job), job.seed)
        judged = {name: values.to_json() for name, values in scores.items()}
        run.preference, run.base_preference = judged.get(final), next(iter(judged.values()))


def collect(job: Job, probes: Path | None = None, *, base: bool = True) -> RecipeRun:
    """The job's final stage and base scores (stored, else measured now) and its costs; with
    a probe file, measured on it (`base=False`: the base is measured with another job)."""
    store = Store(job.plan.config.output_root)
    manifests = {n: _manifest(store, job.plan, n) for n in job.plan.graph.order}
    score, base_score = _scores(job, manifests, probes, base=base or probes is None)
    trained = [m for m in manifests.values() if m.trained_components]
    peaks = [m.metrics.measured_peak_gib for m in manifests.values()]
    return RecipeRun(
        recipe=job.recipe,
        seed=job.seed,
        run_dir=job.run_dir,
        final_stage=final_stage(job.plan),
        score=score,
        base=base_score,
        trained="; ".join(f"{m.stage}: {m.trained_text()}" for m in trained),
        steps=sum(m.metrics.steps or 0 for m in manifests.values()),
        wall_s=sum(m.timings.get("total_s", 0.0) for m in manifests.values()),
        peak_gib=max((p for p in peaks if p is not None), default=None),
        memory_measure=next((m.metrics.memory_measure for m in trained), None),
        platforms=[m.platform for m in manifests.values()],
        cached=_cached_stages(job),
        stages=len(manifests),
    )


def _scores(
    job: Job, manifests: dict[str, Manifest], probes: Path | None, *, base: bool
) -> tuple[Score | None, Score | None]:
    """The final stage's and (`base`) the base's scores: the stored held-out evaluations where
    they used these settings, the rest measured now (everything, on a probe file)."""
    settings, final = _eval_config(job), final_stage(job.plan)
    score, base_score = None, None
    root = manifests[root_stage(job.plan)]
    if probes is None:
        # A final stage trained on other data (DPO's pairs) held out other rows than the probes.
        same_rows = manifests[final].data == root.data
        score = stored_score(manifests[final], settings) if same_rows else None
        base_score = stored_base_score(root, settings)
    wanted = [(final, score), *([(BASE, base_score)] if base else [])]
    missing = [name for name, found in wanted if found is None]
    if missing:
        measured = _measure(job, missing, probes)
        score, base_score = score or measured[final], base_score or measured.get(BASE)
    return score, base_score


def _cached_stages(job: Job) -> list[str]:
    """The stages the job's run reused from the store (its run folder's summary says)."""
    return [row.stage for row in RunSummary.load(job.run_dir).stages if row.status == "cached"]


def _manifest(store: Store, plan: RecipePlan, name: str) -> Manifest:
    return Manifest.load(store.entry(plan.stages[name].fingerprint), stage=name)


def _measure(job: Job, models: list[str], probes: Path | None) -> dict[str, Score | None]:
    """Scores the stored evaluations cannot give (all of them on a probe file), measured as
    `compare` measures them."""
    from recipe_engine.evaluate.probing import evaluate_models

    print(f"experiment: evaluating {', '.join(models)} of `{job.recipe}` (seed {job.seed})")
    metrics = evaluate_models(
        job.run_dir, models, settings=_eval_settings(job), seed=job.seed, probes=probes
    )
    return {name: _score(metrics.get(name)) for name in models}


def _score(values: ModelMetrics | None) -> Score | None:
    """A model's measured metrics (`evaluate.probing`'s record of them) as a score."""
    if values is None:
        return None
    task = values.task
    return Score(
        task.exact_match if task else None,
        task.contains if task else None,
        values.eval_loss,
        values.n,
        source="evaluated",
    )


def _eval_config(job: Job) -> EvalConfig:
    return job.plan.config.eval


def _eval_settings(job: Job) -> dict[str, Any]:
    """The eval settings as the measuring (`evaluate.probing`, `evaluate.pair_judging`) takes
    them."""
    return dataclasses.asdict(job.plan.config.eval)


# --------------------------------------------------------------------------- reporting


def differences(request: ExperimentRequest, jobs: list[Job]) -> str:
    """The settings that differ between the first recipe and each other one, as `diff`
    prints them (with the overrides each recipe got)."""
    stages = {job.recipe: set(job.plan.stages) for job in jobs}
    first, others = request.recipes[0], request.recipes[1:]
    texts = []
    for other in others:
        overrides = _diff_overrides(request.overrides, stages[first], stages[other])
        diff = diff_recipes(first, other, overrides, extra_dirs=request.extra_dirs)
        texts.append(render_diff(diff))
    return "\n\n".join(texts)


def _diff_overrides(overrides: list[str], stages_a: set[str], stages_b: set[str]) -> list[str]:
    """The overrides in `diff`'s terms: a stage override only one side has goes to that side
    (`a.` / `b.`), as the experiment applied it."""
    result = []
    for override in overrides:
        name = override_stage(override)
        body = override.lstrip("+~")
        marks = override[: len(override) - len(body)]
        if name is None or (name in stages_a and name in stages_b):
            result.append(override)
        elif name in stages_a or name in stages_b:
            result.append(f"{marks}{'a' if name in stages_a else 'b'}.{body}")
    return result


def _probes_text(runs: list[RecipeRun], probes: Path | None) -> str:
    """What every model was asked, in words, with the number of rows."""
    samples = next((run.score.samples for run in runs if run.score and run.score.samples), None)
    rows = f" ({samples} rows)" if samples else ""
    if probes is None:
        return f"the held-out split of the shared data{rows}"
    return f"the rows of {probes}{rows}"
