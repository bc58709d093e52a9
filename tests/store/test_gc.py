"""The `runs` verb: listing runs and store entries, `runs rm`, `runs gc`, and its refusals."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from recipe_engine.cli.main import main
from recipe_engine.errors import RecipeError
from recipe_engine.run.machine import platform_here
from recipe_engine.store.collect import collect_garbage
from recipe_engine.store.gc import TMP_GRACE_S, find_entries, find_runs, remove_run, render_listing
from recipe_engine.store.records import Manifest
from recipe_engine.store.store import Store, make_engine_folder, mark_engine_folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """An output root with one small real run of r2 (one stage, two steps)."""
    from recipe_engine.config.compose import compose_config
    from recipe_engine.run.planning import plan_from_config
    from recipe_engine.run.recipe import run_recipe

    tmp = tmp_path_factory.mktemp("real")
    cfg = compose_config(
        [
            "recipe=r2-vision-only",
            f"output_root={tmp}",
            "++stage.vision.train.max_steps=2",
            "data.max_samples=16",
            "eval.max_samples=4",
            "eval.compare=false",
        ]
    )
    run_recipe(plan_from_config(cfg), tmp / "runs" / "r2-vision-only" / "t1")
    return tmp


@pytest.fixture
def root(trained, tmp_path) -> Path:
    """A private copy of the real output root, which a test may change."""
    copy = tmp_path / "outputs"
    shutil.copytree(trained, copy)
    # Summaries name absolute store paths; point them at this copy.
    for summary in copy.rglob("summary.json"):
        summary.write_text(summary.read_text().replace(str(trained), str(copy)))
    return copy


def here(device: str):
    """This machine's platform, as `runs` measures it for a run with default settings."""
    return platform_here(device, deterministic=False)


def entry_of(root: Path) -> str:
    (run,) = find_runs(root)
    (name,) = run.entries
    return name


def fake_entry(
    root: Path,
    name: str,
    *,
    stage: str = "s",
    parent: str | None = None,
    base_location: str | None = None,
) -> Path:
    """A committed store entry with a manifest and some bytes."""
    path = root / "store" / name
    path.mkdir(parents=True)
    Manifest(
        stage=stage,
        recipe="fake",
        fingerprint=name,
        format="full",
        model_entry={"kind": "vlm"},
        dtype="float32",
        parent_fingerprint=parent,
        base_location=base_location,
    ).save(path)
    (path / "weights.bin").write_bytes(b"\0" * 4096)
    (path / "COMPLETE").write_text(json.dumps({"fingerprint": name}))  # as Store.commit
    return path


def fake_run(root: Path, where: str, outputs: dict[str, Path]) -> Path:
    """A run folder whose summary.json references these store paths."""
    run = root / where
    (run / ".hydra").mkdir(parents=True)
    stages = [
        {"stage": s, "status": "trained", "key": p.name[:12], "output": str(p)}
        for s, p in outputs.items()
    ]
    (run / "summary.json").write_text(json.dumps({"recipe": "fake", "stages": stages}))
    return run


def test_listing_shows_runs_stages_and_store_entries(root, capsys):
    assert main(["runs", f"output_root={root}"]) == 0
    out = capsys.readouterr().out
    name = entry_of(root)
    assert "runs/r2-vision-only/t1  recipe r2-vision-only" in out
    assert "vision" in out and "trained" in out and name[:12] in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(name))
    for word in ("vision", "r2-vision-only", "complete", " MB", "acc ", "runs/r2-vision-only/t1"):
        assert word in line


def test_listing_warns_of_entries_from_other_platforms_and_marks_them(root, capsys):
    name = entry_of(root)
    assert main(["runs", f"output_root={root}"]) == 0
    out = capsys.readouterr().out
    assert "platform" in out and "warning" not in out  # trained here, just now
    assert " here " in next(ln for ln in out.splitlines() if ln.strip().startswith(name))
    # The real entry as if trained on a machine with other kernels and threads, beside an
    # entry made here.
    entry = root / "store" / name
    manifest = Manifest.load(entry)
    mine = manifest.platform
    assert mine is not None and mine == here("cpu")
    kernels = "AVX2" if mine.cpu_capability != "AVX2" else "AVX512"
    manifest.platform = replace(mine, cpu_capability=kernels, threads=mine.threads + 2)
    manifest.save(entry)
    local = fake_entry(root, "0" * 40)  # listed first
    local_manifest = Manifest.load(local)
    local_manifest.platform = mine
    local_manifest.save(local)

    assert main(["runs", f"output_root={root}"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ") and ln.split()}
    assert " other " in rows[name] and " here " in rows["0" * 40]
    assert (
        "warning: the store's entries came from 2 platforms, which differ in cpu capability "
        f"{mine.cpu_capability} vs {kernels}, threads {mine.threads} vs {mine.threads + 2}: "
        "floating-point results may differ"
    ) in out
    assert (
        "platform `other` (made elsewhere) vs this machine: cpu capability "
        f"{kernels} vs {mine.cpu_capability}, threads {mine.threads + 2} vs {mine.threads}: "
        "floating-point results may differ"
    ) in out


def test_rm_keeps_store_entries_another_run_uses(root, capsys):
    name = entry_of(root)
    shared = root / "store" / name
    fake_run(root, "sweeps/r2-vision-only/s1/0", {"vision": shared})
    assert main(["runs", "rm", str(root / "runs/r2-vision-only/t1"), f"output_root={root}"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not (root / "runs").exists() or not list((root / "runs").iterdir())
    assert (shared / "COMPLETE").is_file()
    assert "0 store folder(s)" in collect_garbage(root)  # the sweep job still uses it
    assert shared.is_dir()

    # Removing the last run that uses it (relative to output_root) leaves it to gc.
    message = remove_run(root, "sweeps/r2-vision-only/s1")
    assert "runs gc" in message and shared.is_dir()
    report = collect_garbage(root)
    assert "freed" in report and name in report and not shared.exists()


def test_gc_frees_only_unreferenced_entries_and_keeps_ancestors(root):
    real = entry_of(root)
    parent = fake_entry(root, "p" * 20, stage="vision")
    child = fake_entry(root, "c" * 20, stage="llm", parent="p" * 64)
    orphan = fake_entry(root, "o" * 20)
    fake_run(root, "runs/fake/t2", {"llm": child})  # the child's parent is needed, unnamed

    dry = collect_garbage(root, dry_run=True)
    assert "would free" in dry and orphan.name in dry and orphan.is_dir()
    report = collect_garbage(root)
    assert orphan.name in report and not orphan.exists()
    assert parent.is_dir() and child.is_dir() and (root / "store" / real).is_dir()
    assert "kept 3 referenced by 2 run(s)" in report


def test_gc_removes_partial_folders_unless_a_job_holds_their_lock(root):
    store = Store(root)
    idle = root / "store" / f"{'a' * 20}.partial"
    busy = root / "store" / f"{'b' * 20}.partial"
    stale = root / "store" / f"{'d' * 20}.stale"
    for folder in (idle, busy, stale):
        make_engine_folder(folder / "checkpoints")
        mark_engine_folder(folder)
    announced: list[str] = []
    with store.lock("b" * 64):  # a job training this key right now
        report = collect_garbage(root, announce=announced.append)
    assert not idle.exists() and not stale.exists()
    assert busy.is_dir() and "a running job holds its lock" in report
    assert any(idle.name in line for line in announced)
    assert not any(busy.name in line for line in announced), "never announced, then kept"
    assert "partial" in report
    assert any(e.status == "partial" for e in find_entries(root))  # listed as such
    assert "partial" in render_listing(root, here=here)


def test_gc_keeps_merged_bases_of_needed_adapters_and_fresh_tmp_folders(root):
    adapter = fake_entry(root, "e" * 20, stage="llm")
    fake_run(root, "runs/fake/t3", {"llm": adapter})
    kept_merge = root / "store" / f"{'e' * 20}.merged-float32"
    old_merge = root / "store" / f"{'f' * 20}.merged-float32"  # its adapter is gone
    fresh_tmp = root / "store" / f".{'g' * 20}.merged-float32.123.tmp"
    old_tmp = root / "store" / f".{'h' * 20}.merged-float32.456.tmp"
    for folder in (kept_merge, old_merge, fresh_tmp, old_tmp):
        make_engine_folder(folder)
        (folder / "model.safetensors").write_bytes(b"\0" * 100)
    hours_ago = time.time() - 2 * TMP_GRACE_S
    for item in [*old_tmp.iterdir(), old_tmp]:
        os.utime(item, (hours_ago, hours_ago))

    report = collect_garbage(root)
    assert kept_merge.is_dir() and fresh_tmp.is_dir() and adapter.is_dir()
    assert not old_merge.exists() and not old_tmp.exists()
    assert f"kept {fresh_tmp.name} (tmp): being written" in report


@pytest.mark.parametrize("relative", [True, False], ids=["store-relative", "absolute-old"])
def test_gc_keeps_the_merged_base_a_needed_child_loads(root, relative):
    # e.g. the merge of an adapter `init.path`: no needed entry shares its key.
    base = make_engine_folder(root / "store" / f"{'m' * 20}.merged-float32")
    (base / "model.safetensors").write_bytes(b"\0" * 100)
    location = f"./{base.name}" if relative else str(base)
    child = fake_entry(root, "k" * 20, stage="llm", base_location=location)
    fake_run(root, "runs/fake/t4", {"llm": child})

    report = collect_garbage(root)
    assert base.is_dir() and child.is_dir(), report
    assert base.name not in report


def test_nothing_outside_the_output_root_is_touched(root, tmp_path):
    outside = tmp_path / "precious"
    fake_run(tmp_path, "precious", {})
    (root / "store" / "link").symlink_to(outside, target_is_directory=True)
    collect_garbage(root)
    assert (outside / "summary.json").is_file()
    with pytest.raises(RecipeError, match="not inside"):
        remove_run(root, str(outside))
    with pytest.raises(RecipeError, match="symbolic link"):
        (root / "runs" / "escape").symlink_to(outside, target_is_directory=True)
        remove_run(root, str(root / "runs" / "escape"))
    assert (outside / "summary.json").is_file()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("runs/r2-vision-only/nope", "No run folder"),
        ("store", "not inside"),
        ("runs", "not inside"),
        ("runs/r2-vision-only", "not a run folder"),  # a recipe's folder of runs
    ],
)
def test_rm_refuses_what_is_not_a_run_folder(root, target, message, capsys):
    name = entry_of(root)
    if target == "store":
        target = f"store/{name}"
    with pytest.raises(RecipeError, match=message):
        remove_run(root, target)
    assert main(["runs", "rm", target, f"output_root={root}"]) == 2
    assert message in capsys.readouterr().err
    assert (root / "store" / name / "COMPLETE").is_file()
    assert (root / "runs/r2-vision-only/t1/summary.json").is_file()


def test_missing_output_root_and_bad_actions_are_user_errors(tmp_path, capsys):
    assert main(["runs", f"output_root={tmp_path / 'none'}"]) == 2
    assert "No output folder" in capsys.readouterr().err
    assert main(["runs", "prune", f"output_root={tmp_path}"]) == 2
    assert "Unknown `runs` action `prune`" in capsys.readouterr().err
    assert main(["runs", "rm", f"output_root={tmp_path}"]) == 2
    assert "takes one run folder, got 0" in capsys.readouterr().err
    assert main(["runs", "--help"]) == 0
    assert "rm RUN_DIR" in capsys.readouterr().out


def test_gc_never_removes_a_folder_the_engine_did_not_write(root):
    mine = root / "store" / "my-notes"
    (mine / "drafts").mkdir(parents=True)
    (mine / "drafts" / "idea.txt").write_text("keep me")
    lookalike = root / "store" / f"{'z' * 20}.partial"  # named like a work folder, not ours
    lookalike.mkdir()
    theirs = root / "store" / "my-model"  # the user's own model folder, manifest and all
    theirs.mkdir()
    (theirs / "manifest.json").write_text("{their own format")
    report = collect_garbage(root)
    assert (mine / "drafts" / "idea.txt").read_text() == "keep me" and lookalike.is_dir()
    assert "kept my-notes: not written by recipe-engine" in report
    assert "kept my-model: not written by recipe-engine" in report and theirs.is_dir()
    assert "Rerun the stage" not in report and "kept every stage output" not in report


def test_a_damaged_summary_keeps_every_stage_output_and_names_the_file(root, capsys):
    run = fake_run(root, "runs/fake/t5", {"llm": fake_entry(root, "y" * 20, stage="llm")})
    (run / "summary.json").write_text('{"recipe": "fake", "stages": [')  # damaged
    report = collect_garbage(root)
    assert (root / "store" / ("y" * 20)).is_dir()  # the damaged run's output
    assert (root / "store" / entry_of_real(root)).is_dir()
    assert "kept every stage output" in report and str(run / "summary.json") in report
    assert "in 0 store folder(s)" in report


def entry_of_real(root: Path) -> str:
    return next(r for r in find_runs(root) if not r.unreadable).entries.pop()
