"""`compare`'s own keys composed by Hydra beside the engine's: typed, lists in Hydra's grammar,
a misspelt key refused as any engine key is, the engine's overrides passed on as given."""

from __future__ import annotations

import pytest

from recipe_engine.cli.argv import normalise_argv
from recipe_engine.config.compare import HarnessOptions, compose_compare
from recipe_engine.config.schema import EvalConfig
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.comparison import harness_settings
from recipe_engine.store.scores import DEFAULT_LIMIT


def test_recipes_and_seeds_are_typed_lists_and_the_rest_goes_to_every_recipe():
    request = compose_compare(
        [
            "recipes=[r1-llm-only,r3-two-stage]",
            "seeds=[0,1,2]",
            "eval.max_samples=4",
            "++stage.llm.train.max_steps=2",
        ],
        [],
    )
    assert request.options.recipes == ["r1-llm-only", "r3-two-stage"]
    assert request.options.seeds == [0, 1, 2]
    assert request.overrides == ["eval.max_samples=4", "++stage.llm.train.max_steps=2"]
    assert request.config.eval.max_samples == 4
    given = request.eval_settings()
    assert given.keys == {"max_samples"} and given.values.max_samples == 4


def test_a_stage_override_is_for_the_recipes_that_have_the_stage():
    dpo = "++stage.dpo.train.max_steps=4"  # r5 has a dpo stage; the default recipe has not
    request = compose_compare(["recipes=[r3-two-stage,r5-sft-dpo]", dpo], [])
    assert request.overrides == [dpo]
    with pytest.raises(RecipeError, match="names stage `dpo`, which this recipe does not have"):
        compose_compare(["recipe=r3-two-stage", dpo], [])  # one run's compare composes it


def test_one_runs_options_are_typed_and_eval_keys_given_win():
    request = compose_compare(
        ["run=/runs/t1", "probes=p.jsonl", "tasks=[recipe_arith]", "harness.limit=all",
         "eval.max_new_tokens=3", "output_root=elsewhere"],
        [],
    )  # fmt: skip
    options = request.options
    assert (options.run, options.probes, options.tasks) == ("/runs/t1", "p.jsonl", ["recipe_arith"])
    assert options.harness == HarnessOptions(limit="all")
    given = request.eval_settings()
    assert given.keys == {"max_new_tokens"}  # only what was given
    assert given.over(EvalConfig(max_new_tokens=5, max_samples=7)) == EvalConfig(
        max_new_tokens=3, max_samples=7
    )
    assert request.config.output_root == "elsewhere"


def test_a_bare_comma_list_reads_as_a_list_outside_multirun():
    _, args, _ = normalise_argv(["compare", "recipes=r1-llm-only,r3-two-stage", "seeds=0,1"])
    assert compose_compare(args, []).options.seeds == [0, 1]


@pytest.mark.parametrize(
    ("overrides", "named", "key"),
    [
        (["runn=outputs/runs/x"], "Unknown key `runn`. Did you mean `run`?", "runn"),
        (["+harness.limt=4"], "Did you mean `limit`?", "harness.limt"),
        (["recipes=[a,b]", "seeds=[x]"], "seeds=[0,1,2]", "seeds"),
        (["recipes=r1-llm-only"], "recipes=[r1-llm-only,r3-two-stage]", "recipes"),
        (["harness.limit=4"], "need tasks=", "tasks"),
        (["recipes=[a,b]", "tasks=[recipe_arith]"], "not recipes=", "tasks"),
        (["recipes=[a,b]", "run=x"], "Pass one of them", "run"),
        (["recipes=[a,b]", "recipe=text-lora"], "drop `recipe=`", "recipe"),
        (["recipes=[a,b]", "seeds=[1]", "seed=3"], "not both", "seed"),
        (["seeds=[1]"], "recipe-vs-recipe", "seeds"),
        (["probes"], "is not an override: write key=value", "probes"),
        (["recipes=[a,b"], "Check its brackets", "recipes"),
    ],
)
def test_what_compare_refuses_is_one_message_naming_the_key(overrides, named, key):
    with pytest.raises(RecipeError) as refused:
        compose_compare(overrides, [])
    assert named in str(refused.value) and refused.value.key == key


def test_the_harness_limit_is_a_positive_count_or_all():
    assert harness_settings(["t"], HarnessOptions()).limit == DEFAULT_LIMIT
    assert harness_settings(["t"], HarnessOptions(limit="4")).limit == 4
    assert harness_settings(["t"], HarnessOptions(limit="all")).limit is None
    for wrong in ("0", "-3", "some"):
        with pytest.raises(RecipeError, match=f"harness.limit={wrong} must be"):
            harness_settings(["t"], HarnessOptions(limit=wrong))
