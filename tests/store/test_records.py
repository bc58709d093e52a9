"""Typed records: what a stage and a run wrote, read back the same way by every verb."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from platforms import EPYC, H100, XEON

from recipe_engine.config.choices import ModelKind, ModelSource
from recipe_engine.errors import RecipeError
from recipe_engine.store.records import (
    SCHEMA_VERSION,
    Manifest,
    Platform,
    RunSummary,
    StageMetrics,
    StageRow,
    differences_text,
    platform_lines,
    platform_warning,
    relative_to,
)
from recipe_engine.store.store import Store, relative_in_store


def manifest(**fields) -> Manifest:
    base = dict(stage="llm", recipe="r", fingerprint="f" * 40, format="full", dtype="float32")
    return Manifest(**base, model_entry={"kind": "vlm", "id": "m"}, **fields)


def test_a_manifest_round_trips_with_its_version_and_typed_metrics(tmp_path):
    written = manifest(metrics=StageMetrics(steps=3, train_losses=[2.0, 1.0], eval_accuracy=0.5))
    written.save(tmp_path)
    read = Manifest.load(tmp_path)
    assert read == written and read.schema_version == SCHEMA_VERSION
    assert read.metrics.eval_text() == "acc 50%" and read.metrics.loss_text() == "2.000 -> 1.000"


def test_the_loss_cell_reads_first_to_last_and_one_logged_step_as_one_number():
    assert StageMetrics(train_losses=[1.457]).loss_text() == "1.457"  # not "1.457 -> 1.457"
    assert StageMetrics(train_losses=[2.0, 1.5, 1.0]).loss_text() == "2.000 -> 1.000"
    assert StageMetrics().loss_text() == "-"


def test_a_manifest_written_before_versioning_still_loads(tmp_path):
    old = {
        "stage": "llm",
        "recipe": "r",
        "fingerprint": "f",
        "format": "full",
        "dtype": "bf16",
        "model_entry": {"kind": "vlm"},
        "metrics": {"steps": 2, "removed_metric": 1},
        "evaluated": "/somewhere",
    }  # fields a newer or older engine wrote are ignored
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    read = Manifest.load(tmp_path)
    assert read.schema_version == 0 and read.metrics.steps == 2


def test_an_old_manifests_model_entry_reads_typed_with_defaults_and_without_dropped_keys():
    old_entry = {"name": "m", "source": "tiny", "id": "tiny-qwen2", "kind": "causal_lm"}
    model = replace(manifest(), model_entry=old_entry).model
    assert model.source == ModelSource.tiny and model.kind == ModelKind.causal_lm
    assert model.gguf_file is None and model.license is None and model.processor == {}
    dropped = {**old_entry, "tokenizer_id": "m"}  # a key an older engine wrote
    assert replace(manifest(), model_entry=dropped).model == model


def test_a_model_entry_this_engine_cannot_read_is_one_message():
    with pytest.raises(RecipeError, match="Stage `llm`: the model entry its manifest records"):
        _ = replace(manifest(), model_entry={"name": "m", "id": "m", "kind": "audio"}).model
    with pytest.raises(RecipeError, match="missing mandatory value: name"):
        _ = manifest().model


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "not a completed stage output"),
        ("{not json", "corrupt"),
        ("[1]", "corrupt"),
        ('{"stage": "llm"}', "incomplete"),
    ],
)
def test_a_missing_or_damaged_manifest_is_one_message_naming_the_stage(tmp_path, content, says):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(RecipeError, match=says) as error:
        Manifest.load(tmp_path, stage="llm")
    assert "force=[llm]" in str(error.value)


def test_store_paths_are_relative_so_a_moved_store_still_resolves(tmp_path):
    store = Store(tmp_path / "outputs")
    parent = store.entry("a" * 40)
    parent.mkdir(parents=True)
    child = store.entry("b" * 40)
    child.mkdir()
    manifest(base_location=relative_in_store(str(parent), store)).save(child)
    assert Manifest.load(child).base_location == f"./{parent.name}"
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "outputs", moved)
    entry = moved / "store" / child.name
    assert Manifest.load(entry).base_path(entry.parent) == str(moved / "store" / parent.name)
    hub = manifest(base_location="Qwen/Qwen2-VL-7B-Instruct")
    assert hub.base_path(entry.parent) == "Qwen/Qwen2-VL-7B-Instruct"  # not a path: kept


def test_a_run_summary_names_outputs_relative_to_the_run_folder(tmp_path):
    run_dir, entry = tmp_path / "runs" / "r" / "t1", tmp_path / "store" / "abc"
    entry.mkdir(parents=True)
    row = StageRow("llm", "trained", "abc", relative_to(entry, run_dir), init="tiny model m")
    RunSummary("r", [row]).save(run_dir)
    read = RunSummary.load(run_dir)
    assert read.stages[0].output == "../../../store/abc"
    assert read.stages[0].output_path(run_dir) == entry.resolve()


def test_a_folder_without_a_summary_is_not_a_run(tmp_path):
    with pytest.raises(RecipeError, match="not a finished run folder"):
        RunSummary.load(Path(tmp_path))


# --------------------------------------------------------------------------- platforms


def test_the_platform_round_trips_through_manifest_json(tmp_path):
    manifest(platform=H100).save(tmp_path)
    read = Manifest.load(tmp_path)
    assert isinstance(read.platform, Platform) and read.platform == H100
    written = json.loads((tmp_path / "manifest.json").read_text())["platform"]
    assert written["gpu_capability"] == "9.0" and written["libraries"]["torch"] == "2.14.1"


def test_a_manifest_written_before_platforms_were_recorded_reads_without_one(tmp_path):
    manifest().save(tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    del data["platform"]  # as a schema-1 engine wrote it
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    read = Manifest.load(tmp_path)
    assert read.platform is None and read.schema_version == 1


def test_differences_name_the_fields_and_say_when_results_may_differ():
    differences = XEON.differences(EPYC)
    assert [d.text() for d in differences] == [
        "cpu model Intel(R) Xeon(R) Platinum 8480+ vs AMD EPYC",
        "cpu capability AVX512 vs AVX2",
        "threads 4 vs 2",
    ]
    assert differences_text(differences).endswith(": floating-point results may differ")
    python_only = XEON.differences(replace(XEON, python="3.12.1"))
    assert differences_text(python_only) == "python 3.11.7 vs 3.12.1"  # it changes no kernel
    assert XEON.differences(replace(XEON)) == []


def test_a_library_missing_or_not_recorded_on_one_side_is_a_difference():
    older = replace(XEON, libraries={**XEON.libraries, "bitsandbytes": None})
    (difference,) = older.differences(XEON)
    assert difference.text() == "bitsandbytes not installed vs not recorded"


def test_one_line_describes_a_platform():
    assert XEON.describe() == (
        "CPU Intel(R) Xeon(R) Platinum 8480+ (AVX512), 4 threads, torch 2.14.1, "
        "transformers 5.23.0, trl 1.16.0, peft 0.21.2, not deterministic"
    )
    assert H100.describe().startswith("GPU NVIDIA H100 80GB HBM3 (capability 9.0), CPU Intel")


def test_the_warning_names_how_platforms_differ_and_which_result_came_from_which():
    lines = platform_lines("the stages", [("vision", XEON), ("llm", EPYC), ("eval", None)])
    assert lines[0] == (
        "warning: the stages came from 2 platforms, which differ in cpu model Intel(R) Xeon(R) "
        "Platinum 8480+ vs AMD EPYC, cpu capability AVX512 vs AVX2, threads 4 vs 2: "
        "floating-point results may differ"
    )
    assert lines[1:] == [f"  vision: {XEON.describe()}", f"  llm: {EPYC.describe()}"]
    assert platform_lines("the stages", [("vision", XEON), ("llm", replace(XEON))]) == []
    assert platform_warning("the stages", [XEON, None]) is None  # unrecorded: not compared
