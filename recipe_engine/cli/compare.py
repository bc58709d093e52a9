"""`compare`: the base and every stage of a run on the same held-out probes (and, with
`tasks=[...]`, on lm-evaluation-harness tasks); with `recipes=[A,B]`, recipes side by side.

The command line is composed by Hydra with compare's own keys (`config.compare`); the
measuring is `evaluate`'s: one run in `evaluate.comparison`, recipes in `evaluate.experiment`.
"""

from __future__ import annotations

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.compare import compose_compare
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.comparison import compare_one_run
from recipe_engine.evaluate.experiment import run_experiment

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
    """The `compare` verb: one run compared (its tables printed), or with `recipes=`, the
    recipe-vs-recipe experiment."""
    if multirun:
        raise RecipeError(
            "`compare` looks at one run (or recipes=[A,B]); drop -m/--multirun and pass "
            "run=PATH, or seeds=[...] to repeat an experiment."
        )
    overrides, flags = split_hydra_flags(args)
    request = compose_compare(overrides, config_dirs(flags))
    if request.options.recipes is not None:
        return run_experiment(request)
    compare_one_run(request)
    return 0
