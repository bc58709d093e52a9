"""Every shipped recipe trains end to end on the tiny models; outputs load with plain HF calls.

Steps are cut to a handful per stage: these tests pin behaviour (handoff, quantization,
outputs, guard), not learning; `make run` shows learning.
"""

from __future__ import annotations

import json
import shutil
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from recipe_engine.config.compose import available, compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.run.loading import merge_adapter_parent
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe
from recipe_engine.store.metric_text import accuracy_text, eval_text
from recipe_engine.store.records import Manifest, RunSummary, StageMetrics
from recipe_engine.store.stage_records import QuantizationFacts
from recipe_engine.trainers import TRAINERS
from recipe_engine.trainers.online import OnlineKind
from tools.bench_scale import PHASES

SHORT = {"max_steps": 3, "per_device_train_batch_size": 4, "save_steps": 2, "logging_steps": 1}
HELD_OUT_ROWS = 8
# The recipe on a pretrained model (SmolLM2-135M), whose rows cost far more than a tiny
# model's: 2 rows a step and 2 held-out rows. Nothing here reads what it learns or scores
# (steps, files, records and loading are what is checked), and 2 rows still make a batch pad.
PRETRAINED = {"r5-sft-dpo-smollm2"}
PRETRAINED_ROWS = 2
# An online stage's batch of 4 completions: 2 prompts answered twice, 4 tokens each.
ONLINE = {"num_generations": 2, "max_completion_length": 4}


USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")


def short_overrides(recipe: str) -> list[str]:
    cfg = compose_config([f"recipe={recipe}"], extra_dirs=[USER_RECIPES])
    train, held_out = SHORT, HELD_OUT_ROWS
    if recipe in PRETRAINED:
        train = {**SHORT, "per_device_train_batch_size": PRETRAINED_ROWS}
        held_out = PRETRAINED_ROWS
    each = {name: {**train, **_online(stage.trainer)} for name, stage in cfg.stage.items()}
    return [
        f"++stage.{name}.train.{key}={value}"
        for name, keys in each.items()
        for key, value in keys.items()
    ] + ["data.max_samples=24", f"eval.max_samples={held_out}", "eval.compare=false"]


def _online(trainer: str) -> dict[str, int]:
    kind = TRAINERS.get(trainer)
    return ONLINE if kind is not None and isinstance(kind, OnlineKind) else {}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outputs")


def run_overrides(recipe: str, outputs: Path, *extra: str) -> list[str]:
    return [f"recipe={recipe}", f"output_root={outputs}", *short_overrides(recipe), *extra]


def run(recipe: str, outputs: Path, *extra: str):
    cfg = compose_config(
        [f"recipe={recipe}", f"output_root={outputs}", *short_overrides(recipe), *extra],
        extra_dirs=[USER_RECIPES],
    )
    return {r.name: r for r in run_recipe(plan_from_config(cfg), outputs / "runs" / recipe)}


def load_output(folder: Path):
    manifest = Manifest.load(folder)
    cls = AutoModelForImageTextToText if manifest.kind == "vlm" else AutoModelForCausalLM
    if manifest.format == "peft_adapter":
        base = cls.from_pretrained(manifest.base_path(folder.parent))
        return PeftModel.from_pretrained(base, folder), manifest
    return cls.from_pretrained(folder), manifest


@pytest.mark.parametrize("recipe", available("recipe"))
def test_recipe_runs_end_to_end_and_outputs_load(recipe, outputs):
    results = run(recipe, outputs)
    for name, result in results.items():
        assert result.status in ("trained", "cached")  # r3 reuses r2's identical vision stage
        model, manifest = load_output(result.output)
        assert manifest.stage == name and manifest.metrics.steps == 3
        assert (result.output / "COMPLETE").is_file()
        assert manifest.trainable_report["total"].trainable > 0
        assert any(p.numel() for p in model.parameters())
        if result.status == "trained":  # the plan's memory estimate beside the measured peak
            memory = manifest.metrics
            assert memory.estimated_peak_gib > 0 and memory.measured_peak_gib > 0
            assert memory.memory_measure.startswith("live tensor bytes")
            # every phase `make bench-scale` tables is timed (the trainer's construction and
            # the preflight too)
            assert {f"{phase}_s" for phase in PHASES} <= set(manifest.timings), manifest.timings
    summary = json.loads((outputs / "runs" / recipe / "summary.json").read_text())
    assert [row["stage"] for row in summary["stages"]] == list(results)


@pytest.mark.parametrize("recipe", ["r1-llm-only", "r4-joint"])
def test_qlora_recipes_are_quantized_on_cpu_and_say_so(recipe, outputs):
    result = next(iter(run(recipe, outputs).values()))
    manifest = Manifest.load(result.output)
    assert manifest.bits == "4bit"
    census = manifest.census["language_model"].dtype
    assert "torch.uint8" in census, census


def test_two_stage_llm_starts_from_the_vision_stage_weights(outputs):
    results = run("r3-two-stage", outputs)
    vision, _ = load_output(results["vision"].output)
    llm, manifest = load_output(results["llm"].output)
    store = results["vision"].output.parent
    assert manifest.base_path(store) == str(results["vision"].output)
    assert manifest.base_location == f"./{results['vision'].output.name}"  # store-relative
    base = AutoModelForImageTextToText.from_pretrained(
        Manifest.load(results["vision"].output).base_path(store)
    )
    trained = dict(vision.named_parameters())
    downstream = {n.removeprefix("base_model.model."): p for n, p in llm.named_parameters()}
    untouched = dict(base.named_parameters())
    name = "model.visual.blocks.0.attn.qkv.weight"
    assert torch.equal(downstream[name], trained[name])
    assert not torch.equal(trained[name], untouched[name]), "the vision stage changed the tower"
    assert manifest.handoff.counts.checked > 0


def test_adapter_parent_is_merged_parameter_by_parameter(outputs, tmp_path):
    adapter_dir = run("r1-llm-only", outputs)["llm"].output
    manifest = Manifest.load(adapter_dir)
    base_location = manifest.base_path(adapter_dir.parent)
    result = merge_adapter_parent(adapter_dir, "float32", tmp_path / "merged")
    merged_dir, expected = result.folder, result.expected
    merged = dict(AutoModelForImageTextToText.from_pretrained(merged_dir).named_parameters())
    base = dict(AutoModelForImageTextToText.from_pretrained(base_location).named_parameters())
    adapter = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(base_location), adapter_dir
    )
    checked = 0
    for name, module in adapter.base_model.model.named_modules():
        if not hasattr(module, "lora_A") or "default" not in module.lora_A:
            continue
        delta = module.get_delta_weight("default")
        assert torch.allclose(merged[f"{name}.weight"], base[f"{name}.weight"] + delta, atol=1e-6)
        checked += 1
    assert checked > 0 and checked == len(expected) - 1  # every adapted weight, plus lm_head
    lm_head = adapter.base_model.model.lm_head.modules_to_save["default"].weight
    assert torch.equal(merged["lm_head.weight"], lm_head)
    assert set(expected) >= {"lm_head.weight"}


def test_adapter_after_adapter_keeps_a_loadable_base(outputs):
    results = run("user-adapter-chain", outputs)
    second, manifest = load_output(results["second"].output)
    base = Path(manifest.base_path(results["second"].output.parent))
    assert base.is_dir() and ".merged-" in base.name, "the merged parent outlives the stage"
    assert manifest.handoff.counts.checked > 0
    assert isinstance(second, PeftModel)


@pytest.mark.parametrize(
    ("recipe", "model"), [("r1-llm-only", "tiny-llava"), ("text-lora", "tiny-llama")]
)
def test_other_architectures_train_through_the_same_path(recipe, model, outputs, caplog):
    results = run(recipe, outputs, f"model={model}")
    loaded, manifest = load_output(results["llm"].output)
    assert manifest.model_entry["name"] == model
    if model == "tiny-llama":  # built without a pad token: falls back to EOS, and says so
        assert "no pad token" in caplog.text


def test_only_retrains_the_named_stage_after_its_settings_change(outputs):
    first = run("r3-two-stage", outputs)
    changed = run("r3-two-stage", outputs, "only=[llm]", "stage.llm.train.learning_rate=1e-3")
    assert changed["vision"].status == "cached"
    assert changed["vision"].output == first["vision"].output
    assert changed["llm"].status == "trained"
    assert changed["llm"].output != first["llm"].output


def test_only_refuses_a_stage_whose_parent_was_never_trained(tmp_path):
    with pytest.raises(RecipeError, match="Run it first: only=\\[vision\\]"):
        run("r3-two-stage", tmp_path, "only=[llm]")


def test_a_recipe_can_end_with_an_evaluation_stage_cached_like_any_other(outputs):
    first = run("user-with-eval", outputs)
    assert first["eval"].status == "evaluated"
    manifest = Manifest.load(first["eval"].output)
    assert manifest.format == "evaluation" and manifest.metrics.eval_samples == 8
    assert ".merged-" in manifest.base_location  # the llm adapter, merged into its base
    predictions = (first["eval"].output / "predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 8
    again = run("user-with-eval", outputs)
    assert [r.status for r in again.values()] == ["cached", "cached", "cached"]
    regenerated = run("user-with-eval", outputs, "eval.max_new_tokens=4")
    assert regenerated["eval"].status == "evaluated" and regenerated["llm"].status == "cached"


@pytest.mark.parametrize("memo", ["cold", "warm"])
def test_a_run_reads_its_data_once(memo, tmp_path, monkeypatch):
    """Plan, both stages of r3 (one dataset) and the end-of-run compare share one read."""
    from recipe_engine.evaluate.after_run import report_run
    from recipe_engine.resolve import cache as memo_module
    from recipe_engine.resolve import data
    from recipe_engine.resolve import reads as read_memo

    if memo == "cold":  # nothing remembered: the planner reads and checks every row
        # Except the libraries' verdict on the stage settings, which reads no data: kept where
        # this machine has given it, so that no child process imports TRL to give it again.
        verdicts = memo_module.cache_dir() / "libraries"
        if verdicts.is_dir():
            shutil.copytree(verdicts, tmp_path / "memo" / "libraries")
        monkeypatch.setattr(memo_module, "cache_dir", lambda: tmp_path / "memo")
    else:  # remembered: the planner reads nothing, the first stage reads
        plan_from_config(compose_config(run_overrides("r3-two-stage", tmp_path)))
    monkeypatch.setattr(read_memo, "_read", OrderedDict())  # a fresh process: nothing read
    reads: list = []
    real = data.load_splits
    monkeypatch.setattr(data, "load_splits", lambda *a, **k: reads.append(a) or real(*a, **k))
    overrides = [*run_overrides("r3-two-stage", tmp_path), "eval.compare=true"]
    plan = plan_from_config(compose_config(overrides))
    assert len(reads) == (1 if memo == "cold" else 0)
    run_dir = tmp_path / "runs" / "r3"
    report_run(plan, run_recipe(plan, run_dir), run_dir)
    assert len(reads) == 1
    assert (run_dir / "compare.md").is_file()


def test_a_stage_whose_evaluation_fails_stays_committed_and_is_cached_next_time(
    tmp_path, monkeypatch
):
    from recipe_engine.run import evaluation

    def broken(*args, **kwargs):
        raise RuntimeError("generation broke")

    monkeypatch.setattr(evaluation, "generate_answers", broken)
    result = run("r2-vision-only", tmp_path)["vision"]
    manifest = Manifest.load(result.output)
    assert result.status == "trained" and (result.output / "COMPLETE").is_file()
    assert manifest.metrics.evaluation_error == "RuntimeError: generation broke"
    assert manifest.metrics.eval_loss is not None  # what was measured before the failure
    row = RunSummary.load(tmp_path / "runs" / "r2-vision-only").stages[0]
    assert row.status == "trained, evaluation failed"
    monkeypatch.undo()
    assert run("r2-vision-only", tmp_path)["vision"].status == "cached"


def test_a_stage_reused_from_another_platform_says_so_in_its_status_and_the_table(tmp_path):
    from recipe_engine.report.run_report import run_table

    trained = run("r2-vision-only", tmp_path)["vision"]
    here = trained.manifest.platform
    assert here is not None and here.device == "cpu" and here.threads == torch.get_num_threads()
    assert run("r2-vision-only", tmp_path)["vision"].other_platform == []  # this machine
    # The same entry as if it had been trained on a CPU with other kernels.
    kernels = "AVX2" if here.cpu_capability != "AVX2" else "AVX512"
    trained.manifest.platform = replace(here, cpu_capability=kernels)
    trained.manifest.save(trained.output)
    cfg = compose_config(run_overrides("r2-vision-only", tmp_path), extra_dirs=[USER_RECIPES])
    plan, run_dir = plan_from_config(cfg), tmp_path / "runs" / "again"
    results = run_recipe(plan, run_dir)
    assert results[0].status == "cached"
    row = RunSummary.load(run_dir).stages[0]
    assert row.status == "cached (trained on another platform: cpu capability)"
    table = run_table(plan, results, run_dir)
    assert row.status in table
    assert (
        "note: stage `vision` reuses a store entry trained on another platform (there vs here: "
        f"cpu capability {kernels} vs {here.cpu_capability}: floating-point results may differ)"
    ) in table


def test_a_loss_that_becomes_nan_stops_the_stage_and_commits_nothing(tmp_path):
    from recipe_engine.errors import StageFailed

    with pytest.raises(StageFailed, match=r"Stage `llm` stopped at step \d+: the (loss|grad norm)"):
        run("text-lora", tmp_path, "stage.llm.train.learning_rate=1e30")
    store = tmp_path / "store"
    assert not [p for p in store.iterdir() if (p / "COMPLETE").exists()]


def test_a_checkpoint_written_after_divergence_is_never_resumed_from(tmp_path, caplog):
    from recipe_engine.errors import StageFailed
    from recipe_engine.run.trainer import checkpoint_is_finite

    # Saved every step, logged every third: a checkpoint is written after the weights went NaN
    # and before the logged loss stops the stage.
    diverging = (
        "stage.llm.train.learning_rate=1e30",
        "stage.llm.train.save_steps=1",
        "stage.llm.train.logging_steps=3",
    )
    with pytest.raises(StageFailed):
        run("text-lora", tmp_path, *diverging)
    left = sorted((tmp_path / "store").glob("*.partial/checkpoints/checkpoint-*"))
    assert [c for c in left if not checkpoint_is_finite(c)], "the run left no NaN checkpoint"
    with caplog.at_level("WARNING", logger="recipe_engine"), pytest.raises(StageFailed):
        run("text-lora", tmp_path, *diverging)
    assert "its weights hold NaN or infinity" in caplog.text
    resumed = [r.getMessage() for r in caplog.records if "resuming from" in r.getMessage()]
    assert all(checkpoint_is_finite(Path(m.split("resuming from ")[1])) for m in resumed)


@pytest.mark.parametrize(
    ("bits", "text"), [(None, "96%"), ("4bit", "96% (4-bit base)"), ("8bit", "96% (8-bit base)")]
)
def test_a_stage_accuracy_names_the_base_precision_it_was_measured_on(bits, text):
    metrics = StageMetrics(eval_accuracy=0.96, eval_loss=0.037)
    quantization = QuantizationFacts(bits=bits) if bits else QuantizationFacts()
    manifest = Manifest("llm", "r", "k", "full", {}, "float32", quantization=quantization)
    manifest.metrics = metrics
    assert accuracy_text(manifest) == text
    assert eval_text(manifest) == f"acc {text}, loss 0.037"
