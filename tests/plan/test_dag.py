"""The stage graph: order, fan-out, validation, and fingerprints that track only the weights."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from recipe_engine.errors import RecipeError
from recipe_engine.plan import dag


def stage(parent: str | None = None, **train) -> dict:
    return {
        "template": "t",
        "description": "",
        "init": {"from_stage": parent, "model": None, "path": None},
        "freeze": {"components": [], "patterns": []},
        "lora": None,
        "quantization": None,
        "dtype": "float32",
        "train": {"learning_rate": 1e-3, "logging_steps": 10, **train},
    }


def prints(stages: dict, seed: int = 0, data: str = "d") -> dict[str, str]:
    graph = dag.build_graph(stages)
    return dag.fingerprints(
        graph,
        stages,
        source_identity={n: {"source": "tiny", "id": "m"} for n in stages},
        data_identity={n: data for n in stages},
        seed=seed,
    )


def test_order_puts_parents_first_whatever_the_declaration_order():
    graph = dag.build_graph({"llm": stage("vision"), "vision": stage()})
    assert graph.order == ("vision", "llm")
    assert graph.ancestors("llm") == ["vision"]


def test_fan_out_one_parent_many_children():
    graph = dag.build_graph({"a": stage(), "b": stage("a"), "c": stage("a")})
    assert graph.children("a") == ["b", "c"]
    assert graph.root_of("c") == "a"


def test_cycle_is_refused_with_the_path():
    with pytest.raises(RecipeError, match=r"cycle: .*a -> b -> a|cycle: .*b -> a -> b"):
        dag.build_graph({"a": stage("b"), "b": stage("a")})


def test_missing_parent_suggests_the_closest_stage():
    with pytest.raises(RecipeError, match="Did you mean `vision`"):
        dag.build_graph({"vision": stage(), "llm": stage("visoin")})


def test_two_sources_for_one_stage_are_refused():
    bad = stage()
    bad["init"]["path"] = "/x"
    bad["init"]["model"] = "org/m"
    with pytest.raises(RecipeError, match="exactly one of from_stage, model or path"):
        dag.build_graph({"a": bad})


def test_empty_recipe_is_refused():
    with pytest.raises(RecipeError, match="no stages"):
        dag.build_graph({})


def test_stage_feeding_no_target_is_unreachable():
    stages = {"a": stage(), "b": stage("a"), "c": stage("a")}
    with pytest.raises(RecipeError, match="c feed no target"):
        dag.build_graph(stages, targets=["b"])
    assert dag.build_graph(stages, targets=["b", "c"]).order == ("a", "b", "c")


def test_fingerprint_ignores_key_order_comments_and_non_weight_settings():
    base = prints({"a": stage()})["a"]
    reordered = yaml.safe_load(
        "# a comment\n" + yaml.safe_dump(dict(reversed(list(stage().items()))))
    )
    assert prints({"a": reordered})["a"] == base
    assert prints({"a": stage(logging_steps=1, save_steps=7, report_to="wandb")})["a"] == base
    described = stage()
    described["description"] = "another description"
    assert prints({"a": described})["a"] == base


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["train"].update(learning_rate=2e-3),
        lambda s: s.update(dtype="bfloat16"),
        lambda s: s["freeze"]["components"].append("lm_head"),
        lambda s: s.update(lora={"r": 8}),
    ],
)
def test_fingerprint_changes_with_what_determines_weights(change):
    changed = stage()
    change(changed)
    assert prints({"a": changed})["a"] != prints({"a": stage()})["a"]


def test_fingerprint_follows_data_seed_and_parent():
    stages = {"a": stage(), "b": stage("a")}
    base = prints(stages)
    assert prints(stages, seed=1)["b"] != base["b"]
    assert prints(stages, data="other")["a"] != base["a"]
    parent_changed = {"a": stage(learning_rate=5.0), "b": stage("a")}
    assert prints(parent_changed)["b"] != base["b"]


def test_dag_module_imports_no_torch():
    code = "import recipe_engine.plan.dag, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
