"""A recipe-vs-recipe experiment's jobs: what was asked (recipes, seeds, a probe file), checked,
and every (recipe, seed) composed and planned before anything runs, so bad input writes
nothing (`evaluate.experiment` then runs them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, open_dict

from recipe_engine.config.compare import CompareRequest
from recipe_engine.config.compose import available, compose_config
from recipe_engine.config.schema import DataConfig, ModelConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.run.hydra_job import refuse_before_writing, use_planned_devices, without_hydra
from recipe_engine.run.planning import plan_from_config

# The per-run base-vs-stages report loads every model again; the experiment does not need it.
NO_RUN_COMPARE = "eval.compare=false"


@dataclass(frozen=True)
class ExperimentRequest:
    """The recipes compared, with which seeds and probes, and what every recipe gets."""

    recipes: list[str]
    seeds: list[int] | None  # None: the config's seed (default or `seed=N`)
    overrides: list[str]  # applied to every recipe (a stage's, to those with the stage)
    extra_dirs: list[str]
    probes: Path | None = None  # a probe file every model answers (None: the held-out split)


@dataclass
class Job:
    """One recipe with one seed, composed (with Hydra's section, for its run) and planned."""

    recipe: str
    seed: int
    composed: DictConfig
    plan: RecipePlan
    run_dir: Path


def experiment_request(request: CompareRequest) -> ExperimentRequest:
    """The experiment `compare recipes=[...]` asks for, its values checked."""
    options = request.options
    assert options.recipes is not None, "an experiment is asked with recipes="
    recipes = _recipes(options.recipes, request.extra_dirs)
    seeds = _seeds(options.seeds) if options.seeds is not None else None
    probes = _probe_file(options.probes) if options.probes is not None else None
    return ExperimentRequest(recipes, seeds, request.overrides, request.extra_dirs, probes)


def _recipes(names: list[str], extra_dirs: list[str]) -> list[str]:
    named = list(dict.fromkeys(names))  # a recipe listed twice is compared once
    options = sorted({*available("recipe"), *(o for d in extra_dirs for o in _extra(d))})
    for name in named:
        if name not in options:
            raise RecipeError(
                f"Unknown recipe `{name}` in recipes=.{did_you_mean(name, options)} "
                f"Available: {', '.join(options)}.",
                key="recipes",
            )
    if len(named) < 2:
        raise RecipeError(
            f"`recipes=[{','.join(names)}]` names {len(named)} recipe(s); a comparison needs "
            "two or more, e.g. recipes=[r1-llm-only,r3-two-stage] (one run's stages: compare "
            "recipe=NAME).",
            key="recipes",
        )
    return named


def _extra(folder: str) -> list[str]:
    return available("recipe", Path(folder).expanduser())


def _seeds(seeds: list[int]) -> list[int]:
    if not seeds:
        raise RecipeError("`seeds=` is empty: e.g. seeds=[0,1,2].", key="seeds")
    return list(dict.fromkeys(seeds))


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


# --------------------------------------------------------------------------- planning


def plan_jobs(request: ExperimentRequest, stamp: str) -> list[Job]:
    """Every (recipe, seed) composed and planned, refused as a whole before anything runs;
    the run folders share the experiment's time `stamp`."""
    stages = {recipe: _stage_names(recipe, request) for recipe in request.recipes}
    _check_stage_overrides(request.overrides, stages)
    jobs = [
        _job(request, recipe, stages[recipe], seed, stamp)
        for seed in (request.seeds or [None])
        for recipe in request.recipes
    ]
    _check_shared_base(jobs)
    for job in jobs:  # as `run` checks before any folder is made
        refuse_before_writing(job.plan)
        final_stage(job.plan)
        if job.plan.starter_processes and not launcher_kind(job.plan.config.launcher).scheduled:
            raise RecipeError(
                "An experiment runs its recipes in this process; a launcher (torchrun) is "
                f"planned for `{job.recipe}`. Run each recipe with `run` instead.",
                key="parallel",
            )
    if request.probes is not None:  # bad rows are refused before anything trains
        check_probe_file(request.probes, jobs[0].plan)
    use_planned_devices(jobs[0].plan)  # before anything initialises CUDA, as `run` does
    return jobs


def _stage_names(recipe: str, request: ExperimentRequest) -> set[str]:
    cfg = compose_config([f"recipe={recipe}"], extra_dirs=request.extra_dirs)
    return set(cfg.stage)


def override_stage(override: str) -> str | None:
    """The stage a `stage.NAME.KEY=V` override sets (None for any other override)."""
    key = override.partition("=")[0].lstrip("+~")
    return key.split(".")[1] if key.startswith("stage.") and key.count(".") >= 2 else None


def _check_stage_overrides(overrides: list[str], stages: dict[str, set[str]]) -> None:
    """A stage override applies to the recipes that have that stage; one no recipe has is a
    mistake (a typo would otherwise change nothing, silently)."""
    known = set().union(*stages.values())
    for override in overrides:
        name = override_stage(override)
        if name is not None and name not in known:
            raise RecipeError(
                f"`{override}` names stage `{name}`, which none of the recipes has."
                f"{did_you_mean(name, known)} Stages: {', '.join(sorted(known))}.",
                key=override.partition("=")[0].lstrip("+~"),
            )


def _job(
    request: ExperimentRequest, recipe: str, stages: set[str], seed: int | None, stamp: str
) -> Job:
    seeded = [] if seed is None else [f"seed={seed}"]
    # Stage overrides go to the recipes that have the stage (stage.vision.* skips r1).
    common = [o for o in request.overrides if override_stage(o) in (None, *stages)]
    overrides = [f"recipe={recipe}", *common, *seeded, NO_RUN_COMPARE]
    composed = compose_config(overrides, extra_dirs=request.extra_dirs, with_hydra=True)
    plan = plan_from_config(without_hydra(composed))
    # One time stamp for the experiment's run folders; a seed of several gets its own folder.
    name = stamp if seed is None else f"{stamp}-seed{seed}"
    run_dir = Path(plan.config.output_root) / "runs" / plan.recipe / name
    with open_dict(composed.hydra):
        composed.hydra.run.dir = str(run_dir)
    return Job(recipe, plan.config.seed, composed, plan, run_dir)


def final_stage(plan: RecipePlan) -> str:
    """The stage a recipe exists for: its one target, else its one stage no other loads (starts
    from, or learns from as its teacher)."""
    targets = list(plan.config.recipe.targets)
    finals = targets or [n for n in plan.graph.order if not plan.graph.loaded_by(n)]
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
        theirs = _shared_inputs(job.plan)
        for key, mine in _shared_inputs(first.plan).items():
            if mine != theirs[key]:
                raise RecipeError(
                    f"Recipes `{first.recipe}` and `{job.recipe}` use a different {key} "
                    f"({_name(mine)} vs {_name(theirs[key])}): a comparison needs one base "
                    f"model and one data set. Fix: set it for all, e.g. {key}={_name(mine)}.",
                    key=key,
                )


def _shared_inputs(plan: RecipePlan) -> dict[str, ModelConfig | DataConfig]:
    """The root's model and data entries: the probes are the root's held-out rows; a later
    stage may train on other data (DPO's pairs), judged on those pairs besides."""
    root = plan.stages[root_stage(plan)]
    return {"model": root.model, "data": root.data.config}


def _name(entry: ModelConfig | DataConfig) -> str:
    # A model entry without a name is named by its id; a data entry by its path.
    return str(entry.name or getattr(entry, "id", None) or getattr(entry, "path", None))


def check_probe_file(probes: Path, plan: RecipePlan) -> None:
    """The probe rows read as `compare` will read them, for the recipes' model kind."""
    from recipe_engine.evaluate.probes import probe_file_rows

    root = plan.stages[root_stage(plan)]
    probe_file_rows(probes, root.model.kind, plan.config.seed, chat_template="false")
