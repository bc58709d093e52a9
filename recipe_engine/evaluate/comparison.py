"""`compare` on one finished run: the base and every stage on the same probes (and, with
`tasks=[...]`, on lm-evaluation-harness tasks), measured and written as records by
`evaluate.scoring` / `evaluate.harness`, rendered by `report.compare`, printed."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.config.compare import CompareRequest, EvalOverrides, HarnessOptions
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.harness import check_tasks, harness_pass, write_harness
from recipe_engine.evaluate.probing import RunOverrides, model_loaders
from recipe_engine.evaluate.scoring import score_run
from recipe_engine.report.compare import CompareOutputs, newest_run, render_compare
from recipe_engine.store.scores import DEFAULT_LIMIT, HarnessSettings

# `harness.limit=` words for every document of each task.
EVERY_DOCUMENT = ("all", "none")


def compare_one_run(request: CompareRequest) -> None:
    """Find the run (`run=`, else the newest of the recipe), compare it, print the tables and
    where the report is."""
    options = request.options
    harness = None
    if options.tasks is not None:
        harness = harness_settings(options.tasks, options.harness)
        check_tasks(harness)  # before any model loads
    if options.run:
        run_dir = Path(options.run).expanduser()
    else:
        config = request.config
        run_dir = newest_run(Path(config.output_root), str(config.recipe.name))
    result = compare_run(
        run_dir,
        probes=options.probes,
        harness=harness,
        settings=request.eval_settings(),
        run_passes=options.run_passes,
    )
    _print(result)


def _print(result: CompareOutputs) -> None:
    print(result.table)
    if result.harness is not None:
        print()
        print(result.harness_table)
    for line in result.platform_warning:
        print(line)
    print(f"report:    {result.report}")
    print(f"table:     {result.scored.csv}")
    if result.harness is not None:
        print(f"harness:   {result.harness.csv}")
    print(f"loss plot: {result.loss_plot or '(no stage metrics)'}")


def compare_run(
    run_dir: Path,
    *,
    probes: str | Path | None = None,
    harness: HarnessSettings | None = None,
    settings: EvalOverrides | None = None,
    run_passes: bool = False,
) -> CompareOutputs:
    """Compare base and every stage of a finished run on one probe set: measured and written
    as records on the run side (`evaluate.scoring.score_run`; `settings` are eval settings
    over the run's own), rendered by `report.compare`. With `harness`, the same models on
    lm-evaluation-harness tasks too, in the same pass (`evaluate.harness.harness_pass`): each
    model loads once. `run_passes`: a model the run measured itself is read from its record."""
    overrides = RunOverrides(settings=settings, measured=run_passes)
    if harness is None:
        return render_compare(score_run(run_dir, probes=probes, overrides=overrides))
    kind, _ = model_loaders(Path(run_dir))
    with harness_pass(harness, kind) as on_harness:  # each model loads once, for both
        scored = score_run(run_dir, probes=probes, overrides=overrides, also=on_harness)
    tasks = write_harness(Path(run_dir), on_harness.result(), scored.stem)
    return render_compare(scored, tasks)


def harness_settings(tasks: list[str], options: HarnessOptions) -> HarnessSettings:
    """What the harness is asked: `tasks=[...]`, `harness.limit=N|all` (unset: the fixed
    default) and `harness.include_path=DIR`."""
    limit: int | None = DEFAULT_LIMIT
    text = (options.limit or str(DEFAULT_LIMIT)).strip().lower()
    if text in EVERY_DOCUMENT:
        limit = None
    elif not text.isdigit() or int(text) < 1:
        raise RecipeError(
            f"harness.limit={text} must be a positive number of documents per task, or all.",
            key="harness.limit",
        )
    else:
        limit = int(text)
    path = options.include_path
    include = Path(path).expanduser().resolve() if path else None
    return HarnessSettings(tuple(tasks), limit=limit, include_path=include)
