"""An adapter parent's merge is verified before a child trains on it (run/merge_check.py).

The chain is `user-adapter-chain` (two LoRA stages on tiny-qwen2), run as quickly as
tests/run/test_recipe.py runs recipes; the tampered runs break the merge inside PEFT and
check that the child is refused, nothing of it is stored, and the parent is kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from peft.tuners.tuners_utils import BaseTuner
from test_recipe import run  # the quick-run helper (tests/run is on the path)
from transformers import PreTrainedModel

from recipe_engine.errors import StageFailed
from recipe_engine.run.loading import merge_adapter_parent
from recipe_engine.run.merge_check import MERGE_CHECK, Reference, tensor_problems
from recipe_engine.store.records import Manifest

RECIPE = "user-adapter-chain"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outputs")


def merged_folders(outputs: Path) -> list[Path]:
    return sorted((outputs / "store").glob("*.merged-*"))


def stage_entries(outputs: Path, stage: str) -> list[Path]:
    manifests = (outputs / "store").glob("*/manifest.json")
    return [m.parent for m in manifests if Manifest.load(m.parent).stage == stage]


def test_a_chain_records_its_verified_merge_in_the_child_manifest(outputs):
    results = run(RECIPE, outputs)
    check = Manifest.load(results["second"].output).handoff.merge_check
    assert check.max_abs_logit_diff <= check.tolerance < check.adapter_effect
    assert check.tensors_checked > 0 and check.changed_as_expected > 0
    (merged,) = merged_folders(outputs)
    assert (merged / MERGE_CHECK).is_file(), "verified once, then reused by later children"


def refuse(outputs: Path, monkeypatch, tamper) -> str:
    """Run the chain again with the merge re-done through `tamper`; the refusal's message."""
    parent = run(RECIPE, outputs)["first"].output
    for folder in merged_folders(outputs) + stage_entries(outputs, "second"):
        shutil.rmtree(folder)
    merge = BaseTuner.merge_and_unload
    monkeypatch.setattr(BaseTuner, "merge_and_unload", lambda self, **kw: tamper(self, merge))
    with pytest.raises(StageFailed) as refused:
        run(RECIPE, outputs)
    assert (parent / "adapter_model.safetensors").is_file(), "the parent is kept"
    assert merged_folders(outputs) == [], "the bad merge is not left to be reused"
    assert stage_entries(outputs, "second") == [], "no child was trained"
    return str(refused.value)


def test_a_merge_that_ignores_the_adapter_is_refused(outputs, monkeypatch):
    message = refuse(outputs, monkeypatch, lambda tuner, merge: tuner.unload())
    assert "stage `first`" in message and "the adapter was not merged" in message


def test_a_merge_that_changes_a_tensor_the_adapter_does_not_touch_is_refused(outputs, monkeypatch):
    def noisy(tuner, merge):
        model = merge(tuner)
        with torch.no_grad():
            model.model.norm.weight.add_(1e-3)  # not a LoRA target: must arrive bitwise equal
        return model

    message = refuse(outputs, monkeypatch, noisy)
    assert "stage `first`" in message and "model.norm.weight" in message


def test_a_tensor_missing_from_the_merge_or_changed_without_an_adapter_is_named():
    logits = torch.zeros(1, 1, 2)
    checksums = {"a": "1", "head": "2", "norm": "3", "vision.b": "4"}
    ref = Reference(logits, logits, checksums, frozenset({"a"}), frozenset({"head"}))
    merged = {"a": "9", "head": "8", "norm": "7"}
    assert tensor_problems(ref, merged) == (["vision.b"], ["norm"], 1)


def test_a_merge_saved_without_its_vision_tower_is_refused(tmp_path, monkeypatch):
    """ms-swift #9187: the merged VLM saved without `visual.*`; the child would load a
    re-initialised vision tower. Every vision tensor then differs from the base's."""
    adapter = run("r1-llm-only", tmp_path)["llm"].output
    save = PreTrainedModel.save_pretrained

    def without_vision(model, folder, **kwargs):
        state = {k: v for k, v in model.state_dict().items() if ".visual." not in f".{k}"}
        return save(model, folder, state_dict=state, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", without_vision)
    into = tmp_path / "merged"
    with pytest.raises(StageFailed) as refused:
        merge_adapter_parent(adapter, "float32", into, "llm")
    assert "stage `llm`" in str(refused.value) and "visual" in str(refused.value)
    assert not into.exists() and (adapter / "adapter_model.safetensors").is_file()
