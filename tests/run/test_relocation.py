"""Outputs travel: a finished outputs/ copied elsewhere (the original deleted) still loads.

r3 (a full vision stage, then a 4-bit LoRA stage on it) and an adapter chain (LoRA on a tiny
base, then LoRA on the first adapter merged into that base) are trained once, with the
handful of steps the other recipe tests use; the copy is loaded with plain transformers and
PEFT calls, and `runs` and `compare` read it.
"""

from __future__ import annotations

import json
import shutil
import stat
from dataclasses import asdict
from pathlib import Path

import pytest
from peft import AutoPeftModelForCausalLM, PeftModel
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from recipe_engine.cli.main import main
from recipe_engine.config.compose import compose_config
from recipe_engine.config.schema import ModelConfig
from recipe_engine.files import current_umask
from recipe_engine.resolve.model_files import adapter_base_location
from recipe_engine.run.loading import name_adapter_base
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe
from recipe_engine.store.records import ADAPTER, EVALUATION, Manifest, RunSummary

RECIPES = ("r3-two-stage", "user-adapter-chain")
USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")
SHORT = {"max_steps": 3, "per_device_train_batch_size": 4, "save_steps": 2, "logging_steps": 1}


def run(recipe: str, outputs: Path) -> None:
    """The recipe with a handful of steps per stage, as tests/run/test_recipe.py runs them."""
    stages = compose_config([f"recipe={recipe}"], extra_dirs=[USER_RECIPES]).stage
    short = [f"++stage.{name}.train.{k}={v}" for name in stages for k, v in SHORT.items()]
    overrides = [f"recipe={recipe}", f"output_root={outputs}", *short]
    overrides += ["data.max_samples=24", "eval.enabled=false", "eval.compare=false"]
    plan = plan_from_config(compose_config(overrides, extra_dirs=[USER_RECIPES]))
    run_recipe(plan, outputs / "runs" / recipe)


@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> tuple[Path, Path]:
    """(the copy of outputs/, the deleted original's path)."""
    original = tmp_path_factory.mktemp("original") / "outputs"
    for recipe in RECIPES:
        run(recipe, original)
    copy = tmp_path_factory.mktemp("elsewhere") / "outputs"
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)
    return copy, original


def auto_class(manifest: Manifest) -> type:
    return AutoModelForImageTextToText if manifest.kind == "vlm" else AutoModelForCausalLM


def stage_outputs(copy: Path) -> list[tuple[Path, Manifest]]:
    entries = [p for p in sorted((copy / "store").iterdir()) if (p / "COMPLETE").is_file()]
    return [(p, Manifest.load(p)) for p in entries]


def test_every_stage_loads_from_the_moved_copy(moved):
    copy, _ = moved
    formats = []
    for folder, manifest in stage_outputs(copy):
        formats.append(manifest.format)
        if manifest.format == EVALUATION:
            continue
        if manifest.format != ADAPTER:
            assert any(p.numel() for p in auto_class(manifest).from_pretrained(folder).parameters())
            continue
        named = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
        if named.startswith("./"):  # a stage (or merged stage) of this store, named by the store
            base = copy / "store" / named
            assert base.is_dir() and named == manifest.base_location, named
        else:  # the tiny base: built from config in the machine's cache, outside outputs/
            base = Path(manifest.base_path(folder.parent))
            assert named == str(base) and base.is_dir() and not base.is_relative_to(copy)
        model = PeftModel.from_pretrained(auto_class(manifest).from_pretrained(base), folder)
        assert any(".lora_" in name for name, _ in model.named_parameters())
    assert formats.count(ADAPTER) == 3 and len(formats) == 4  # r3: 1 + 1, the chain: 2


def test_adapter_on_a_stored_base_loads_with_autopeft_from_the_store(moved, monkeypatch):
    """transformers resolves a relative base against the current directory: the store."""
    copy, _ = moved
    summary = RunSummary.load(copy / "runs" / "user-adapter-chain")
    second = summary.stages[1].output_path(copy / "runs" / "user-adapter-chain")
    monkeypatch.chdir(copy / "store")
    model = AutoPeftModelForCausalLM.from_pretrained(second.name)
    assert isinstance(model, PeftModel)


def test_no_record_in_the_copy_names_the_original(moved):
    copy, original = moved
    for pattern in ("*.json", "*.jsonl", "*.md", "*.csv"):
        for path in copy.rglob(pattern):
            assert str(original) not in path.read_text(), path


def test_runs_and_compare_work_on_the_copy(moved, capsys):
    copy, original = moved
    assert main(["runs", f"output_root={copy}"]) == 0
    listing = capsys.readouterr().out
    for recipe in RECIPES:
        assert recipe in listing
    for recipe in RECIPES:
        run_dir = copy / "runs" / recipe
        assert main(["compare", f"run={run_dir}", "eval.max_samples=2"]) == 0, recipe
        assert (run_dir / "compare.md").is_file()
    assert str(original) not in capsys.readouterr().out


def test_committed_outputs_have_the_modes_the_umask_gives(moved):
    """safetensors writes 0600 on its own; the store holds 0644 / 0755 under umask 022."""
    copy, _ = moved  # copytree keeps the modes the run wrote
    mask = current_umask()
    for path in (copy / "store").rglob("*"):
        if path.name.endswith(".lock"):
            continue  # filelock's own files, not outputs
        expected = (0o777 if path.is_dir() else 0o666) & ~mask
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


# ------------------------------------------------------------------ the pieces, no training


def saved_adapter(folder: Path, base: str) -> Path:
    """What PEFT's save_pretrained leaves: the base named by the path it was loaded from."""
    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": base, "peft_type": "LORA", "revision": None}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    card = f"---\nbase_model: {base}\ntags:\n- base_model:adapter:{base}\n---\n# Model Card\n"
    (folder / "README.md").write_text(card)
    return folder


def test_an_adapter_on_a_stored_base_names_it_relative_to_the_store(tmp_path):
    store = tmp_path / "outputs" / "store"
    adapter = saved_adapter(store / "child.partial" / "final", str(store / "parent"))
    name_adapter_base(adapter, "./parent", None)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "./parent" and config["revision"] is None
    card = (adapter / "README.md").read_text()
    assert str(store) not in card and "base_model: ./parent" in card


def test_an_adapter_on_a_hub_base_keeps_the_id_and_pins_the_revision(tmp_path):
    adapter = saved_adapter(tmp_path / "a", "Qwen/Qwen2-VL-7B-Instruct")
    name_adapter_base(adapter, "Qwen/Qwen2-VL-7B-Instruct", "abc123")
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "Qwen/Qwen2-VL-7B-Instruct"
    assert config["revision"] == "abc123"


def test_engine_readers_resolve_a_relative_base_against_the_adapters_store(tmp_path, monkeypatch):
    store = tmp_path / "store"
    (store / "parent").mkdir(parents=True)
    adapter = store / "child"
    monkeypatch.chdir(tmp_path)  # not the store: transformers alone would miss `./parent`
    assert adapter_base_location(adapter, "./parent") == str(store / "parent")
    assert (
        adapter_base_location(adapter, "Qwen/Qwen2-VL-7B-Instruct") == "Qwen/Qwen2-VL-7B-Instruct"
    )
    assert adapter_base_location(adapter, "./mine") == "./mine"  # a user's cwd-relative path
    assert adapter_base_location(adapter, str(tmp_path)) == str(tmp_path)


def test_a_tiny_base_missing_on_this_machine_is_rebuilt_from_the_model_entry(tmp_path):
    from recipe_engine.resolve.models import model_location

    model = ModelConfig(name="tiny-qwen2", source="tiny", id="tiny-qwen2", kind="causal_lm")
    here = Path(model_location(model))
    entry = asdict(model)  # as the manifest records it
    elsewhere = f"/elsewhere/.cache/recipe-engine/models/{here.name}"
    fields = dict(stage="llm", recipe="r", fingerprint="f" * 40, format=ADAPTER, dtype="float32")
    root = Manifest(**fields, model_entry=entry, base_location=elsewhere)
    assert root.loadable_base(tmp_path) == str(here)
    other_build = Manifest(**fields, model_entry=entry, base_location=elsewhere + "-old")
    assert other_build.loadable_base(tmp_path) == elsewhere + "-old"  # other weights: not swapped
    from_path = Manifest(**fields, model_entry=entry, base_location=elsewhere)
    from_path.config = {"init": {"path": elsewhere}}
    assert from_path.loadable_base(tmp_path) == elsewhere  # a user's folder is never guessed
