"""The command line's grammar: what Hydra gets from what the user typed."""

from __future__ import annotations

import inspect

import pytest

from recipe_engine.cli.argv import VERBS, expand_sweep, normalise_argv
from recipe_engine.cli.main import handler


@pytest.mark.parametrize(
    ("argv", "verb", "args"),
    [
        (["recipe=r3-two-stage", "gpus=6,7"], "run", ["recipe=r3-two-stage", "gpus=[6,7]"]),
        (["plan", "gpus=6,7"], "plan", ["gpus=[6,7]"]),
        (["gpus=[6,7]"], "run", ["gpus=[6,7]"]),
        (["gpus=6"], "run", ["gpus=6"]),
        (["only=vision,llm"], "run", ["only=[vision,llm]"]),
        (["compare", "recipes=a,b", "seeds=0,1"], "compare", ["recipes=[a,b]", "seeds=[0,1]"]),
        # In multirun a comma is a sweep, as Hydra users expect.
        (["-m", "gpus=6,7"], "run", ["-m", "gpus=6,7"]),
        ([], "run", []),
        # Library settings take any key of their class without Hydra's `+`.
        (["stage.llm.train.weight_decay=0.1"], "run", ["++stage.llm.train.weight_decay=0.1"]),
    ],
)
def test_argv_is_normalised_before_hydra_parses_it(argv, verb, args):
    assert normalise_argv(argv)[:2] == (verb, args)


def test_multirun_sweep_expands_with_hydras_parser():
    _, args, _ = normalise_argv(
        ["-m", "recipe=r1-llm-only", "stage.llm.train.learning_rate=1e-4,2e-4,3e-4"]
    )
    jobs = expand_sweep([a for a in args if a != "-m"])
    assert len(jobs) == 3
    assert jobs[1] == ["recipe=r1-llm-only", "++stage.llm.train.learning_rate=0.0002"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_takes_the_command_lines_arguments_and_multirun(verb):
    parameters = inspect.signature(handler(verb)).parameters
    assert list(parameters) == ["args", "multirun"]
