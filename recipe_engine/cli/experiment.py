"""`compare recipes=[A,B] [seeds=[0,1,2]] [probes=FILE]`: recipes side by side on one base and
one data set.

Every (recipe, seed) job is composed and planned first, so bad input writes nothing. Each job
then runs exactly as the `run` verb runs it (Hydra's entry point, its own run folder, stages
reused from the store), without the per-run compare report: the experiment needs only each
recipe's final stage and the base, and takes their scores from the stages' stored held-out
evaluations where those used the experiment's settings, measuring only what is missing. With
`probes=FILE` every final stage and the base are measured on the file's rows (read and checked
before anything trains), as `compare run=... probes=FILE` measures them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.cli.argv import config_dirs
from recipe_engine.cli.run import config_key, run_hydra_app
from recipe_engine.config.compose import available, compose_config
from recipe_engine.errors import EXIT_INCOMPLETE, RecipeError, did_you_mean
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.report.diff import diff_recipes, render_diff
from recipe_engine.report.experiment import (
    BASE,
    RecipeRun,
    Score,
    differences_sentence,
    stored_base_score,
    stored_score,
    summarize,
)
from recipe_engine.report.experiment_report import Experiment, write_experiment
from recipe_engine.report.plots import MISSING
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import stages_to_run
from recipe_engine.store.records import Manifest, RunSummary
from recipe_engine.store.scores import ModelMetrics
from recipe_engine.store.store import Store, check_output_root

# The experiment's own keys; every other override goes to each recipe.
OWN_KEYS = ("recipes", "seeds", "probes")
# The per-run base-vs-stages report loads every model again; the experiment does not need it.
NO_RUN_COMPARE = "eval.compare=false"


@dataclass
class Job:
    """One recipe with one seed, planned."""

    recipe: str
    seed: int
    overrides: list[str]
    plan: RecipePlan
    run_dir: Path


@dataclass
class Request:
    recipes: list[str]
    seeds: list[int] | None  # None: the config's seed (default or `seed=N`)
    overrides: list[str]  # applied to every recipe
    extra_dirs: list[str]
    probes: Path | None = None  # a probe file every model answers (None: the held-out split)


def main(overrides: list[str], flags: list[str]) -> int:
    """Plan every job, train or reuse each, then write and print the comparison."""
    request = parse_request(overrides, flags)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    jobs = plan_jobs(request, stamp)
    for job in jobs:
        code = train(job)
        if code:
            print(f"error: recipe `{job.recipe}` did not finish: no comparison.", file=sys.stderr)
            return code
    runs = collect_all(jobs, request.probes)
    root = Path(jobs[0].plan.config.output_root)
    folder = root / "experiments" / "-vs-".join(request.recipes) / stamp
    settings = _eval_settings(jobs[0])
    probes = _probes(runs) if request.probes is None else _probe_file_text(runs, request.probes)
    experiment = Experiment(runs, settings, differences(request, jobs), probes)
    written = write_experiment(folder, experiment)
    _print(written, runs)
    return 0


# --------------------------------------------------------------------------- input


def parse_request(overrides: list[str], flags: list[str]) -> Request:
    """The experiment's recipes and seeds, and the overrides every recipe gets."""
    own: dict[str, str] = {}
    rest: list[str] = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key in OWN_KEYS:
            own[key] = value
        else:
            rest.append(item)
    extra_dirs = config_dirs(flags)
    recipes = _recipes(own["recipes"], extra_dirs)
    seeds = _seeds(own["seeds"]) if "seeds" in own else None
    probes = _probe_file(own["probes"]) if "probes" in own else None
    for item in rest:
        key = item.partition("=")[0].lstrip("+~")
        if key == "recipe":
            raise RecipeError("`recipes=` names the recipes; drop `recipe=`.", key="recipe")
        if key == "seed" and seeds is not None:
            raise RecipeError("Pass `seeds=[...]` or `seed=N`, not both.", key="seed")
    return Request(recipes, seeds, rest, extra_dirs, probes)


def _names(value: str) -> list[str]:
    """`[a,b]`, `a,b` or `a`: Hydra's list syntax, read without Hydra (nothing is swept)."""
    inner = value.strip().removeprefix("[").removesuffix("]")
    return [part.strip().strip("'\"") for part in inner.split(",") if part.strip()]


def _recipes(value: str, extra_dirs: list[str]) -> list[str]:
    names = list(dict.fromkeys(_names(value)))  # a recipe listed twice is compared once
    options = sorted({*available("recipe"), *(o for d in extra_dirs for o in _extra(d))})
    for name in names:
        if name not in options:
            raise RecipeError(
                f"Unknown recipe `{name}` in recipes=.{did_you_mean(name, options)} "
                f"Available: {', '.join(options)}.",
                key="recipes",
            )
    if len(names) < 2:
        raise RecipeError(
            f"`recipes={value}` names {len(names)} recipe(s); a comparison needs two or more, "
            "e.g. recipes=[r1-llm-only,r3-two-stage] (one run's stages: compare recipe=NAME).",
            key="recipes",
        )
    return names


def _extra(folder: str) -> list[str]:
    return available("recipe", Path(folder).expanduser())


def _probe_file(value: str) -> Path:
    """The probe file: rows with references (the answer line scores them), as `compare` reads."""
    path = Path(value).expanduser().resolve()
    if not path.is_file():
        raise RecipeError(
            f"`probes={value}`: no such file. Point it at rows like the data (.jsonl, .json, "
            ".csv, .parquet) with the answers as references.",
            key="probes",
        )
    if path.suffix.lower() == ".txt":
        raise RecipeError(
            f"`probes={value}` is a .txt of prompts without references, so no recipe can be "
            "scored on it. Give rows with answers (prompt/completion, messages, ...), or read "
            "answers side by side with: compare run=<run folder> probes=FILE.",
            key="probes",
        )
    return path


def _seeds(value: str) -> list[int]:
    try:
        seeds = [int(part) for part in _names(value)]
    except ValueError:
        raise RecipeError(
            f"`seeds={value}` must be a list of integers, e.g. seeds=[0,1,2].", key="seeds"
        ) from None
    if not seeds:
        raise RecipeError("`seeds=` is empty: e.g. seeds=[0,1,2].", key="seeds")
    return list(dict.fromkeys(seeds))


# --------------------------------------------------------------------------- planning


def plan_jobs(request: Request, stamp: str) -> list[Job]:
    """Every (recipe, seed) composed and planned, refused as a whole before anything runs."""
    stages = {recipe: _stage_names(recipe, request) for recipe in request.recipes}
    _check_stage_overrides(request.overrides, stages)
    jobs = [
        _job(request, recipe, stages[recipe], seed, stamp)
        for seed in (request.seeds or [None])
        for recipe in request.recipes
    ]
    _check_shared_base(jobs)
    for job in jobs:  # as `run` checks before any folder is made
        check_output_root(job.plan.config.output_root)
        stages_to_run(job.plan, Store(job.plan.config.output_root))
        final_stage(job.plan)
        if job.plan.launcher_processes:
            raise RecipeError(
                "An experiment runs its recipes in this process; a launcher (torchrun) is "
                f"planned for `{job.recipe}`. Run each recipe with `run` instead.",
                key="parallel",
            )
    if request.probes is not None:  # bad rows are refused before anything trains
        check_probe_file(request.probes, jobs[0].plan)
    visible = jobs[0].plan.cuda_visible_devices
    if visible is not None:  # before anything initialises CUDA, as `run` does
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return jobs


def _stage_names(recipe: str, request: Request) -> set[str]:
    cfg = compose_config([f"recipe={recipe}"], extra_dirs=request.extra_dirs)
    return set(cfg.stage)


def _override_stage(override: str) -> str | None:
    """The stage a `stage.NAME.KEY=V` override sets (None for any other override)."""
    key = override.partition("=")[0].lstrip("+~")
    return key.split(".")[1] if key.startswith("stage.") and key.count(".") >= 2 else None


def _check_stage_overrides(overrides: list[str], stages: dict[str, set[str]]) -> None:
    """A stage override applies to the recipes that have that stage; one no recipe has is a
    mistake (a typo would otherwise change nothing, silently)."""
    known = set().union(*stages.values())
    for override in overrides:
        name = _override_stage(override)
        if name is not None and name not in known:
            raise RecipeError(
                f"`{override}` names stage `{name}`, which none of the recipes has."
                f"{did_you_mean(name, known)} Stages: {', '.join(sorted(known))}.",
                key=override.partition("=")[0].lstrip("+~"),
            )


def _job(request: Request, recipe: str, stages: set[str], seed: int | None, stamp: str) -> Job:
    seeded = [] if seed is None else [f"seed={seed}"]
    # Stage overrides go to the recipes that have the stage (stage.vision.* skips r1).
    common = [o for o in request.overrides if _override_stage(o) in (None, *stages)]
    overrides = [f"recipe={recipe}", *common, *seeded, NO_RUN_COMPARE]
    plan = plan_from_config(compose_config(overrides, extra_dirs=request.extra_dirs))
    # One time stamp for the experiment's run folders; a seed of several gets its own folder.
    name = stamp if seed is None else f"{stamp}-seed{seed}"
    run_dir = Path(plan.config.output_root) / "runs" / plan.recipe / name
    return Job(recipe, plan.config.seed, overrides, plan, run_dir)


def final_stage(plan: RecipePlan) -> str:
    """The stage a recipe exists for: its one target, else its one stage no other starts from."""
    targets = list(plan.config.recipe.targets)
    finals = targets or [n for n in plan.graph.order if not plan.graph.children(n)]
    if len(finals) != 1:
        raise RecipeError(
            f"Recipe `{plan.recipe}` ends in {len(finals)} stages ({', '.join(finals)}); an "
            "experiment compares one final stage per recipe. Fix: name it with "
            "recipe.targets=[STAGE] in the recipe.",
            key="recipe.targets",
        )
    return finals[0]


def root_stage(plan: RecipePlan) -> str:
    """The stage that starts from the base (it measured the base on its held-out rows)."""
    return next(n for n in plan.graph.order if plan.stages[n].parent is None)


def _check_shared_base(jobs: list[Job]) -> None:
    """Every recipe starts from one base model and is scored on one data set: otherwise the
    comparison is not of recipes."""
    first = jobs[0]
    for job in jobs[1:]:
        for key, (mine, theirs) in _base_and_data(first.plan, job.plan).items():
            if mine != theirs:
                raise RecipeError(
                    f"Recipes `{first.recipe}` and `{job.recipe}` use a different {key} "
                    f"({_name(mine)} vs {_name(theirs)}): a comparison needs one base model "
                    f"and one data set. Fix: set it for all, e.g. {key}={_name(mine)}.",
                    key=key,
                )


def _base_and_data(a: RecipePlan, b: RecipePlan) -> dict[str, tuple[Any, Any]]:
    def entries(plan: RecipePlan) -> tuple[Any, Any]:
        # The probes are the root's held-out rows; a later stage may train on other data
        # (DPO's pairs), judged on those pairs besides (`judge_preference`).
        root = plan.stages[root_stage(plan)]
        return dataclasses.asdict(root.model), dataclasses.asdict(root.data.config)

    (model_a, data_a), (model_b, data_b) = entries(a), entries(b)
    return {"model": (model_a, model_b), "data": (data_a, data_b)}


def _name(entry: dict[str, Any]) -> str:
    return str(entry.get("name") or entry.get("id") or entry.get("path"))


# --------------------------------------------------------------------------- running


def train(job: Job) -> int:
    """Run the job as `run` does (its exit code): Hydra's entry point, the job's plan."""
    args = [*job.overrides, f"hydra.run.dir={job.run_dir}"]
    try:
        run_hydra_app(args, {config_key(job.plan.config): job.plan})
    except SystemExit as stop:  # the job printed why; its code says stage failed or bad input
        return stop.code if isinstance(stop.code, int) else EXIT_INCOMPLETE
    return 0


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

    settings = _eval_settings(jobs[0])
    limit = settings.get("max_samples")
    found = (run_judged_rows(job.run_dir, job.seed, limit) for job in jobs)
    rows = next((r for r in found if r), None)
    if rows is None:
        return
    kind = "unpaired feedback row(s)" if "label" in rows[0] else "preference pair(s)"
    for job, run in zip(jobs, runs, strict=True):
        print(f"experiment: judging `{job.recipe}` on {len(rows)} {kind}")
        final = final_stage(job.plan)
        scores = judge_on_rows(job.run_dir, [final], rows, settings, job.seed)
        judged = {name: values.to_json() for name, values in scores.items()}
        run.preference, run.base_preference = judged.get(final), next(iter(judged.values()))


def collect(job: Job, probes: Path | None = None, *, base: bool = True) -> RecipeRun:
    """The job's final stage and base scores (stored, else measured now) and its costs; with
    a probe file, measured on it (`base=False`: the base is measured with another job)."""
    store = Store(job.plan.config.output_root)
    manifests = {n: _manifest(store, job.plan, n) for n in job.plan.graph.order}
    final = final_stage(job.plan)
    score, base_score = _scores(job, manifests, probes, base=base or probes is None)
    trained = [m for m in manifests.values() if m.trained_components]
    peaks = [m.metrics.measured_peak_gib for m in manifests.values()]
    return RecipeRun(
        recipe=job.recipe,
        seed=job.seed,
        run_dir=job.run_dir,
        final_stage=final,
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
    settings, final = _eval_settings(job), final_stage(job.plan)
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
        measured = _measure(job, missing, settings, probes)
        score, base_score = score or measured[final], base_score or measured.get(BASE)
    return score, base_score


def _cached_stages(job: Job) -> list[str]:
    """The stages the job's run reused from the store (its run folder's summary says)."""
    return [row.stage for row in RunSummary.load(job.run_dir).stages if row.status == "cached"]


def _manifest(store: Store, plan: RecipePlan, name: str) -> Manifest:
    return Manifest.load(store.entry(plan.stages[name].fingerprint), stage=name)


def _measure(
    job: Job, models: list[str], settings: dict[str, Any], probes: Path | None = None
) -> dict[str, Score | None]:
    """Scores the stored evaluations cannot give (all of them on a probe file), measured as
    `compare` measures them."""
    from recipe_engine.evaluate.probing import evaluate_models

    print(f"experiment: evaluating {', '.join(models)} of `{job.recipe}` (seed {job.seed})")
    metrics = evaluate_models(job.run_dir, models, settings=settings, seed=job.seed, probes=probes)
    return {name: _score(metrics.get(name)) for name in models}


def _score(values: ModelMetrics | None) -> Score | None:
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


def _eval_settings(job: Job) -> dict[str, Any]:
    return dataclasses.asdict(job.plan.config.eval)


# --------------------------------------------------------------------------- reporting


def differences(request: Request, jobs: list[Job]) -> str:
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
        name = _override_stage(override)
        body = override.lstrip("+~")
        marks = override[: len(override) - len(body)]
        if name is None or (name in stages_a and name in stages_b):
            result.append(override)
        elif name in stages_a or name in stages_b:
            result.append(f"{marks}{'a' if name in stages_a else 'b'}.{body}")
    return result


def _probes(runs: list[RecipeRun]) -> str:
    samples = next((run.score.samples for run in runs if run.score and run.score.samples), None)
    rows = f" ({samples} rows)" if samples else ""
    return f"the held-out split of the shared data{rows}"


def _probe_file_text(runs: list[RecipeRun], probes: Path) -> str:
    samples = next((run.score.samples for run in runs if run.score and run.score.samples), None)
    return f"the rows of {probes}{f' ({samples} rows)' if samples else ''}"


def check_probe_file(probes: Path, plan: RecipePlan) -> None:
    """The probe rows read as `compare` will read them, for the recipes' model kind."""
    from recipe_engine.evaluate.probes import probe_file_rows

    root = plan.stages[root_stage(plan)]
    probe_file_rows(probes, root.model.kind, plan.config.seed, chat_template="false")


def _print(written: dict[str, Any], runs: list[RecipeRun]) -> None:
    recipes = list(dict.fromkeys(run.recipe for run in runs))
    seeds = sorted({run.seed for run in runs})
    print(f"\nexperiment: {' vs '.join(recipes)} (seed {', '.join(map(str, seeds))})")
    print(written["table"])
    for line in written["platform_warning"]:
        print(line)
    print(differences_sentence(summarize(runs)))
    for line in written["preference"]:
        print(line)
    print(f"report: {written['report']}")
    print(f"table:  {written['csv']}")
    charts = [str(path) for path in written["plots"].values() if path is not None]
    print(f"charts: {', '.join(charts) if charts else MISSING if written['plots'] else '-'}")
    print(written["answer"])  # last: the line that answers the question
