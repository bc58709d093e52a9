"""A key names a result: two trainings of one stage key give bitwise-identical weights.

Each stage kind the store keys (full fine-tune, LoRA, QLoRA, joint; DPO and KTO with either
reference) is trained twice into two empty output folders, and the weight files are compared
byte for byte. A fresh process starts torch's generator from a random seed, so before each
training every generator is scrambled the way a new process would find it. Before the engine
seeded LoRA's initialisation, every adapter stage here differed. (DDP:
tests/cli/test_run_distributed.py.)
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from recipe_engine.config.compose import compose_config
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe

USER_RECIPES = str(Path(__file__).parents[1] / "fixtures" / "recipes")
# Recipe -> its stages, one of each kind the store keys (KTO on the tiny text model).
RECIPES = {
    "user-every-kind": ("full", "lora", "qlora", "joint", "dpo", "dpo_full"),
    "user-kto-kinds": ("kto", "kto_full"),
}
KINDS = tuple(kind for kinds in RECIPES.values() for kind in kinds)


def short(recipe: str) -> list[str]:
    return [
        f"recipe={recipe}",
        "device=cpu",
        "data.max_samples=32",
        "eval.enabled=false",
        *(f"++stage.{kind}.train.max_steps=3" for kind in RECIPES[recipe]),
    ]


def scramble_generators() -> None:
    """Every global generator in a random state, as a fresh process has it."""
    torch.seed()
    random.seed()
    np.random.seed()


def train(output_root: Path) -> dict[str, dict[str, str]]:
    """Train each stage alone, from scrambled generators; return its weight-file hashes."""
    for recipe, kind in ((recipe, kind) for recipe, kinds in RECIPES.items() for kind in kinds):
        overrides = [*short(recipe), f"only=[{kind}]", f"output_root={output_root}"]
        plan = plan_from_config(compose_config(overrides, extra_dirs=[USER_RECIPES]))
        scramble_generators()
        results = {r.name: r for r in run_recipe(plan, output_root / "runs" / kind)}
        assert results[kind].status == "trained"
    return weight_hashes(output_root)


def weight_hashes(output_root: Path) -> dict[str, dict[str, str]]:
    """{stage name: {weight file: sha256}} of every stage in the store."""
    stages = {}
    for manifest in sorted(output_root.glob("store/*/manifest.json")):
        name = json.loads(manifest.read_text())["stage"]
        files = sorted(manifest.parent.glob("*.safetensors"))
        stages[name] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    return stages


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("determinism")


@pytest.fixture(scope="module")
def two_trainings(root):
    return train(root / "first"), train(root / "second")


@pytest.mark.parametrize("kind", KINDS)
def test_two_trainings_of_one_key_give_identical_weights(two_trainings, kind):
    first, second = two_trainings
    assert first[kind], f"stage {kind} wrote no weights"
    assert first[kind] == second[kind]


def test_every_kind_trained_weights_of_its_own(two_trainings):
    first, _ = two_trainings
    assert len({json.dumps(hashes, sort_keys=True) for hashes in first.values()}) == len(KINDS)


def test_each_manifest_says_what_its_weights_repeat_and_where(two_trainings, root):
    for path in (root / "first").glob("store/*/manifest.json"):
        manifest = json.loads(path.read_text())
        assert manifest["determinism"]["repeatable"] is True
        assert "thread count" in manifest["determinism"]["scope"]
        assert manifest["platform"]["threads"] == torch.get_num_threads()
