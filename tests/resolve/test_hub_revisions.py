"""Hub models are planned, keyed and loaded at a commit; the first run pins the default branch.

A fake Hugging Face cache in tmp_path, laid out as huggingface_hub writes it (refs/<branch>
holding a commit, snapshots/<commit>/ holding the files), stands in for the hub: no network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants
from machines import CPU_ONLY

from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.plan.render import render_plan
from recipe_engine.resolve.hub_revisions import pin_revisions, pins_path
from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.run.planning import plan_from_config

REPO = "acme/tiny-lm"
A = "a" * 40
B = "b" * 40
HUB_ENTRY = ("recipe=text-lora", "model.source=hub", f"model.id={REPO}")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline hub cache holding REPO at commit A, on branch main."""
    folder = tmp_path / "hub"
    # huggingface_hub read the environment at import: patch its constants as well.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    commit(folder, A)
    return folder


def commit(cache: Path, sha: str, branch: str = "main") -> None:
    """The tiny causal LM as snapshot `sha` of REPO, with `branch` pointing at it."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / sha
    if not snapshot.is_dir():
        shutil.copytree(build_tiny_model("tiny-qwen2"), snapshot)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / branch).write_text(sha)


def plan(root: Path, *overrides: str) -> RecipePlan:
    config = compose_config([*HUB_ENTRY, f"output_root={root}", *overrides])
    return plan_from_config(config, CPU_ONLY)


def llm(root: Path, *overrides: str) -> StagePlan:
    return plan(root, *overrides).stages["llm"]


def test_plan_keys_loads_and_prints_the_cached_commit(cache: Path, tmp_path: Path) -> None:
    result = plan(tmp_path / "out")
    stage = result.stages["llm"]
    assert stage.init.identity == {"source": "hub", "id": REPO, "revision": A}
    assert stage.init.revision == A and stage.model.revision == A  # what `run` loads
    assert stage.init.description == f"hub model {REPO} at {A[:12]}"
    text = render_plan(result)
    assert f"revision:  {A[:12]} (default branch, resolved now from the local cache" in text
    assert "`run` pins it" in text
    assert not (tmp_path / "out").exists(), "plan writes nothing"


def test_a_pin_outlives_a_moved_branch_until_the_user_names_a_revision(
    cache: Path, tmp_path: Path
) -> None:
    root = tmp_path / "out"
    first = llm(root)
    assert [p.commit for p in pin_revisions(root, [first.init.hub_revision])] == [A]
    commit(cache, B)  # upstream moved, and the cache followed
    pinned = llm(root)
    assert pinned.fingerprint == first.fingerprint and pinned.model.revision == A
    assert pinned.init.hub_revision.describe().startswith(f"{A[:12]} (pinned 20")
    assert pin_revisions(root, [pinned.init.hub_revision]) == []  # pinned already
    # A store without the pin takes the branch as it is now: another commit, another key.
    unpinned = llm(tmp_path / "elsewhere")
    assert unpinned.model.revision == B and unpinned.fingerprint != first.fingerprint
    # A revision the user names wins over the pin: a commit as given, a branch as it is now.
    given = llm(root, f"model.revision={B}")
    assert given.fingerprint == unpinned.fingerprint and given.init.hub_revision.origin == "given"
    followed = llm(root, "model.revision=main")
    assert followed.fingerprint == unpinned.fingerprint
    assert "(main, resolved now from the local cache)" in followed.init.hub_revision.describe()
    assert pin_revisions(root, [given.init.hub_revision, followed.init.hub_revision]) == []
    pins = json.loads(pins_path(root).read_text())["models"]
    assert list(pins) == [REPO] and pins[REPO]["commit"] == A


def test_a_pinned_commit_missing_from_the_cache_is_not_replaced(
    cache: Path, tmp_path: Path
) -> None:
    root = tmp_path / "out"
    pin_revisions(root, [llm(root).init.hub_revision])
    shutil.rmtree(cache)
    commit(cache, B)  # a fresh cache that only has the new commit
    stage = llm(root)
    assert stage.model.revision == A and f"{REPO} at revision {A}" in stage.init.unavailable


def test_a_model_neither_cached_nor_reachable_plans_as_before(cache: Path, tmp_path: Path) -> None:
    stage = llm(tmp_path / "out", "model.id=acme/not-cached")
    assert stage.init.hub_revision is None and stage.model.revision is None
    assert stage.init.identity["revision"] is None
    assert "HF_HUB_OFFLINE=1 is set" in stage.init.unavailable


def test_a_damaged_pins_file_is_one_message(cache: Path, tmp_path: Path) -> None:
    root = tmp_path / "out"
    pins_path(root).parent.mkdir(parents=True)
    pins_path(root).write_text('{"models": {"acme/tiny-lm": {"commit": "main"}}}')
    with pytest.raises(RecipeError, match="not a valid hub revisions file") as error:
        plan(root)
    assert error.value.key == "output_root"


def test_run_pins_the_commit_it_loads_and_records_it_in_the_manifest(
    cache: Path, tmp_path: Path
) -> None:
    from recipe_engine.run.recipe import run_recipe
    from recipe_engine.store.records import Manifest

    root = tmp_path / "out"
    short = [
        "data.max_samples=16",
        "eval.enabled=false",
        "eval.compare=false",
        "++stage.llm.train.max_steps=1",
        "stage.llm.train.per_device_train_batch_size=4",
    ]
    [result] = run_recipe(plan(root, *short), root / "runs" / "text-lora")
    manifest = Manifest.load(result.output)
    assert manifest.model_entry["revision"] == A and manifest.base_location == REPO
    assert json.loads(pins_path(root).read_text())["models"][REPO]["commit"] == A
    commit(cache, B)
    assert llm(root, *short).fingerprint == manifest.fingerprint  # reused, not retrained
