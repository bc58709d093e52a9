"""`compare`: the base and every stage of a run on the same held-out probes (and, with
`tasks=[...]`, on lm-evaluation-harness tasks); with `recipes=[A,B]`, recipes side by side
(cli/experiment.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.harness import check_tasks, harness_pass, write_harness
from recipe_engine.evaluate.probing import RunOverrides, model_loaders
from recipe_engine.evaluate.scoring import score_run
from recipe_engine.report.compare import CompareOutputs, newest_run, render_compare
from recipe_engine.store.scores import DEFAULT_LIMIT, HarnessSettings

USAGE = """\
usage: recipe-engine compare [run=RUN_DIR] [probes=FILE] [recipe=NAME] [eval.KEY=V ...]
                             [tasks=[T1,T2] [harness.limit=N] [harness.include_path=DIR]]
       recipe-engine compare recipes=[A,B,...] [seeds=[0,1,2]] [probes=FILE] [key=value ...]

Evaluate the base model and every stage of a run on the same held-out probes with the same
generation settings: exact match, contains, eval loss (the stage's own held-out loss, as its
trainer measures it). Every model is measured on the full-precision base; the table also shows
the run's own accuracy and loss, labelled with the base precision they were measured on (4-bit
for a QLoRA stage). Writes compare.csv, predictions JSONL, compare.md and plots in the run
folder and prints the table; with probes=FILE the files are compare-<file stem>.* instead,
beside the run's own report.

With recipes=[A,B,...] it compares recipes instead: every recipe (per seed) is planned first,
then trained or reused from the store exactly as `run` does (each gets its run folder), and
each recipe's final stage and the shared base are scored on the same held-out probes with the
same settings (stored evaluations reused, only missing ones measured). It writes
experiment.md, experiment.csv and bar charts under <output_root>/experiments/<A-vs-B>/<time>/,
prints the table (over seeds: mean [min..max]) and ends with one `answer:` line. Exit codes:
0 done, 1 a stage failed, 2 bad input (nothing written).

With tasks=[T1,T2] (one run, not recipes=) the base and every stage also run those tasks of
EleutherAI's lm-evaluation-harness (pip install 'recipe-engine[eval]'), on the same models:
a second table (model, task, metric, score, the lm_eval version, the task's config hash) is
printed and written to compare.md, compare_harness.csv and compare_harness.json. Shipped,
offline: recipe_arith (generated answer, exact match) and recipe_arith_mc (multiple choice,
accuracy); any other task the installed harness knows, or your own YAML in
harness.include_path=DIR. Unknown names are refused before any model loads.

options:
  run=RUN_DIR        the run to compare (default: the newest run of recipe=NAME)
  probes=FILE        your own probe rows (the run's held-out split by default)
  eval.max_new_tokens=N eval.batch_size=N eval.max_samples=N   generation settings
  recipes=[A,B]      recipe vs recipe (same model and data; other overrides apply to all)
  seeds=[0,1,2]      train and score every recipe with each seed (default: the config's seed)
  probes=FILE        with recipes=: every final stage and the base scored on these rows
                     (rows with references in any data format; checked before training)
  tasks=[T1,T2]      lm-evaluation-harness tasks for the base and every stage of the run
  harness.limit=N    documents per task (default 50; harness.limit=all for every one)
  harness.include_path=DIR   a folder of your own harness task YAML files

examples:
  python -m recipe_engine compare recipe=r3-two-stage
  python -m recipe_engine compare run=outputs/runs/r3-two-stage/2026-11-22_13-31-12
  python -m recipe_engine compare recipes=[r1-llm-only,r3-two-stage] seeds=[0,1,2]
  python -m recipe_engine compare recipes=[r1-llm-only,r3-two-stage] probes=my_probes.jsonl
  python -m recipe_engine compare recipe=text-lora tasks=[recipe_arith,recipe_arith_mc]
"""


def main(args: list[str], multirun: bool) -> int:
    """The `compare` verb: find the run, compare, print the metrics and the report's path;
    with `recipes=`, the recipe-vs-recipe experiment."""
    if multirun:
        raise RecipeError(
            "`compare` looks at one run (or recipes=[A,B]); drop -m/--multirun and pass "
            "run=PATH, or seeds=[...] to repeat an experiment."
        )
    overrides, flags = split_hydra_flags(args)
    keys = {item.partition("=")[0] for item in overrides}
    if "recipes" in keys:
        if keys & set(HARNESS_KEYS):
            raise RecipeError(
                "tasks= scores one run's stages (compare recipe=NAME or run=DIR tasks=[...]), "
                "not recipes=[...].",
                key="tasks",
            )
        from recipe_engine.cli import experiment

        return experiment.main(overrides, flags)
    own: dict[str, str] = {}
    rest: list[str] = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key in ("run", "probes", *HARNESS_KEYS):  # compare's own keys, not config keys
            own[key] = value
        else:
            rest.append(item)
    harness = harness_settings(own)
    if harness is not None:
        check_tasks(harness)  # before any model loads
    # Composing validates every override (types, unknown keys) with the engine's own messages.
    cfg = compose_config(rest, extra_dirs=config_dirs(flags))
    if own.get("run"):
        run_dir = Path(own["run"]).expanduser()
    else:
        run_dir = newest_run(Path(cfg.output_root), str(cfg.recipe.name))
    settings = {key: cfg.eval[key] for key in _eval_keys(rest)}
    result = compare_run(
        run_dir, probes=own.get("probes") or None, harness=harness, settings=settings
    )
    _print(result)
    return 0


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
    settings: dict[str, Any] | None = None,
) -> CompareOutputs:
    """Compare base and every stage of a finished run on one probe set: measured and written
    as records on the run side (`evaluate.scoring.score_run`; `settings` are eval settings
    over the run's own), rendered by `report.compare`. With `harness`, the same models on
    lm-evaluation-harness tasks too, in the same pass (`evaluate.harness.harness_pass`): each
    model loads once."""
    overrides = RunOverrides(settings=settings)
    if harness is None:
        return render_compare(score_run(run_dir, probes=probes, overrides=overrides))
    kind, _ = model_loaders(Path(run_dir))
    with harness_pass(harness, kind) as on_harness:  # each model loads once, for both
        scored = score_run(run_dir, probes=probes, overrides=overrides, also=on_harness)
    tasks = write_harness(Path(run_dir), on_harness.result(), scored.stem)
    return render_compare(scored, tasks)


HARNESS_KEYS = ("tasks", "harness.limit", "harness.include_path")


def harness_settings(own: dict[str, str]) -> HarnessSettings | None:
    """`tasks=[a,b]` (Hydra's list syntax, read without Hydra), `harness.limit=N|all` and
    `harness.include_path=DIR`; None without tasks=."""
    if "tasks" not in own:
        if own.keys() & {"harness.limit", "harness.include_path"}:
            raise RecipeError("harness.* settings need tasks=[...] to run.", key="tasks")
        return None
    inner = own["tasks"].strip().removeprefix("[").removesuffix("]")
    tasks = tuple(part.strip().strip("'\"") for part in inner.split(",") if part.strip())
    limit: int | None = DEFAULT_LIMIT
    text = own.get("harness.limit", str(DEFAULT_LIMIT)).strip().lower()
    if text in ("all", "null", "none"):
        limit = None
    elif not text.isdigit() or int(text) < 1:
        raise RecipeError(
            f"harness.limit={text} must be a positive number of documents per task, or all.",
            key="harness.limit",
        )
    else:
        limit = int(text)
    path = own.get("harness.include_path")
    include = Path(path).expanduser().resolve() if path else None
    return HarnessSettings(tasks, limit=limit, include_path=include)


def _eval_keys(overrides: Sequence[str]) -> list[str]:
    """The eval.* keys set on the command line: they win over the run's own settings."""
    keys = []
    for item in overrides:
        key = item.partition("=")[0].lstrip("+~")
        if key.startswith("eval."):
            keys.append(key.removeprefix("eval."))
    return keys
