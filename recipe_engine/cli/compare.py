"""`compare`: the base and every stage of a run on the same held-out probes; with
`recipes=[A,B]`, recipes side by side (cli/experiment.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.report.compare import newest_run, render_compare
from recipe_engine.run.scoring import score_run

USAGE = """\
usage: recipe-engine compare [run=RUN_DIR] [probes=FILE] [recipe=NAME] [eval.KEY=V ...]
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

options:
  run=RUN_DIR        the run to compare (default: the newest run of recipe=NAME)
  probes=FILE        your own probe rows (the run's held-out split by default)
  eval.max_new_tokens=N eval.batch_size=N eval.max_samples=N   generation settings
  recipes=[A,B]      recipe vs recipe (same model and data; other overrides apply to all)
  seeds=[0,1,2]      train and score every recipe with each seed (default: the config's seed)
  probes=FILE        with recipes=: every final stage and the base scored on these rows
                     (rows with references in any data format; checked before training)

examples:
  python -m recipe_engine compare recipe=r3-two-stage
  python -m recipe_engine compare run=outputs/runs/r3-two-stage/2026-11-22_13-31-12
  python -m recipe_engine compare recipes=[r1-llm-only,r3-two-stage] seeds=[0,1,2]
  python -m recipe_engine compare recipes=[r1-llm-only,r3-two-stage] probes=my_probes.jsonl
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
    if any(item.partition("=")[0] == "recipes" for item in overrides):
        from recipe_engine.cli import experiment

        return experiment.main(overrides, flags)
    own: dict[str, str] = {}
    rest: list[str] = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key in ("run", "probes"):  # compare's own keys, not recipe config keys
            own[key] = value
        else:
            rest.append(item)
    # Composing validates every override (types, unknown keys) with the engine's own messages.
    cfg = compose_config(rest, extra_dirs=config_dirs(flags))
    if own.get("run"):
        run_dir = Path(own["run"]).expanduser()
    else:
        run_dir = newest_run(Path(cfg.output_root), str(cfg.recipe.name))
    settings = {key: cfg.eval[key] for key in _eval_keys(rest)}
    result = compare_run(run_dir, probes=own.get("probes") or None, settings=settings)
    print(result["table"])
    for line in result["platform_warning"]:
        print(line)
    print(f"report:    {result['report']}")
    print(f"table:     {result['csv']}")
    print(f"loss plot: {result['loss_plot'] or '(no stage metrics)'}")
    return 0


def compare_run(
    run_dir: Path, *, probes: str | Path | None = None, **measuring: Any
) -> dict[str, Any]:
    """Compare base and every stage of a finished run on one probe set: measured and written
    as records on the run side (`run.scoring.score_run`, which takes `settings`, `seed` and
    `held_out`), rendered by `report.compare`. Returns the written paths, the per-model metrics
    and the printed table."""
    return render_compare(score_run(run_dir, probes=probes, **measuring))


def _eval_keys(overrides: Sequence[str]) -> list[str]:
    """The eval.* keys set on the command line: they win over the run's own settings."""
    keys = []
    for item in overrides:
        key = item.partition("=")[0].lstrip("+~")
        if key.startswith("eval."):
            keys.append(key.removeprefix("eval."))
    return keys
