"""One stage, top to bottom: load, policies, guard, preflight, train, evaluate, store."""

from __future__ import annotations

import json
import logging
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from recipe_engine.dag import canonical_hash
from recipe_engine.data import load_splits
from recipe_engine.errors import RecipeError
from recipe_engine.hardware import is_main_process
from recipe_engine.loading import (
    check_handoff,
    handoff_checksums,
    is_adapter_folder,
    load_pretrained,
    load_processor,
    merge_adapter_parent,
    read_manifest,
    torch_dtype,
)
from recipe_engine.modeling import model_location
from recipe_engine.planning import RecipePlan, StagePlan
from recipe_engine.store import Store, write_json

log = logging.getLogger("recipe_engine")

LIBRARIES = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets")


def train_stage(plan: RecipePlan, stage: StagePlan, store: Store, *, fresh: bool) -> dict[str, Any]:
    started = time.time()
    timings: dict[str, float] = {}
    work = store.work_dir(stage.fingerprint)
    main_process = is_main_process()
    if fresh and work.exists() and main_process:
        shutil.rmtree(work)  # start fresh really means fresh: no checkpoint is picked up
    work.mkdir(parents=True, exist_ok=True)
    entry = stage.model
    placement = stage.placement

    # 1. Where the weights come from.
    location, handoff_from = _init_location(plan, stage, store)
    base_location = location
    log.info("stage %s: loading %s", stage.name, location)

    # 2. Load, quantizing on load if the stage asks to.
    from recipe_engine.components import architecture_of

    quant_config = None
    model_config = _config_of(location, entry)
    architecture = architecture_of(model_config.model_type)
    if stage.quant_bits != "none":
        from recipe_engine.policies.quant import bnb_config

        names = _module_names(model_config, entry["kind"])
        quant_config = bnb_config(
            stage.quantization or {},
            architecture=architecture,
            module_names=names,
            trained=stage.trained,
        )
    t = time.time()
    model = load_pretrained(
        location,
        entry,
        dtype=stage.dtype,
        device_map=placement.device_map,
        quantization_config=quant_config,
    )
    processor = load_processor(location, entry["kind"], entry)
    timings["load_s"] = time.time() - t
    _pad_token_fallback(processor)

    handoff: dict[str, Any] = {}
    if handoff_from is not None:
        parent_name, expected = handoff_from
        handoff = check_handoff(model, expected, parent_name)
        log.info("stage %s: handoff from %s verified %s", stage.name, parent_name, handoff)

    # 3. Policies: freeze, LoRA, gradient checkpointing.
    from recipe_engine.policies.freeze import apply_freeze
    from recipe_engine.policies.report import census, format_report, trainable_report

    apply_freeze(
        model,
        architecture=architecture,
        components=stage.frozen,
        patterns=stage.settings["freeze"].get("patterns") or [],
    )
    if stage.settings.get("lora"):
        from recipe_engine.policies.lora import apply_lora

        model = apply_lora(
            model,
            architecture=architecture,
            lora=stage.settings["lora"],
            frozen=stage.frozen,
            patterns=stage.settings["freeze"].get("patterns") or [],
            gradient_checkpointing=stage.settings["gradient_checkpointing"],
        )
    elif stage.settings["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    report = trainable_report(model, architecture=architecture)
    dtype_census = census(model, architecture=architecture)
    log.info(
        "stage %s: trainable parameters and census\n%s",
        stage.name,
        format_report(report, dtype_census),
    )

    # 4. Data, trainer, guard, preflight.
    from trl import SFTTrainer

    from recipe_engine.training import (
        MetricsLogger,
        align_trainable_dtype,
        apply_guard,
        build_args,
        check_parameter_devices,
        planned_steps,
        preflight,
        verify_trainer,
    )

    if placement.mode in ("single",) or placement.device == "cpu":
        check_parameter_devices(model, placement)
    splits = load_splits(stage.data, kind=entry["kind"], seed=plan.config["seed"])
    args = build_args(
        stage.settings.get("train") or {},
        output_dir=store.checkpoints(stage.fingerprint),
        placement=placement,
        dtype=stage.dtype,
        seed=plan.config["seed"],
        gradient_checkpointing=stage.settings["gradient_checkpointing"],
        kind=entry["kind"],
        has_eval=splits.eval is not None,
    )
    apply_guard(args, placement)
    metrics_log = MetricsLogger(work / "metrics.jsonl")
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=splits.train,
        eval_dataset=splits.eval,
        processing_class=processor,
        callbacks=[metrics_log],
    )
    if not args.bf16:
        align_trainable_dtype(trainer.model, torch_dtype(stage.dtype))
    expected = planned_steps(args, len(splits.train), placement.world_size)
    steps = verify_trainer(trainer, placement, expected)
    preflight_loss = preflight(trainer)

    # 5. Train (resuming from the latest checkpoint of an interrupted run of this stage).
    resume = None if fresh else store.latest_checkpoint(stage.fingerprint)
    if resume:
        log.info("stage %s: resuming from %s", stage.name, resume)
    if main_process:  # drop what an interrupted attempt logged past its last checkpoint
        metrics_log.resume_from(int(resume.name.split("-")[-1]) if resume else 0)
    t = time.time()
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    timings["train_s"] = time.time() - t

    # 6. Evaluate on the held-out split.
    metrics: dict[str, Any] = {
        "steps": trainer.state.global_step,
        "planned_steps": steps,
        "preflight_loss": preflight_loss,
        "train_losses": metrics_log.losses(),
        "train_samples": len(splits.train),
    }
    evaluation = plan.config["eval"]
    if splits.eval is not None and evaluation["enabled"]:
        t = time.time()
        held_out = _capped(splits.eval, evaluation["max_samples"])
        metrics["eval_loss"] = trainer.evaluate(held_out)["eval_loss"]  # every rank takes part
        metrics["eval_samples"] = len(held_out)
        if main_process:  # generation is per-process work: rank 0 measures it once
            metrics["eval_accuracy"] = _accuracy(trainer.model, processor, held_out, entry, plan)
            if stage.parent is None:
                metrics["base_accuracy"] = _base_accuracy(
                    base_location, entry, stage, held_out, plan
                )
        timings["eval_s"] = time.time() - t

    # 7. Store: a self-contained folder, committed atomically by rank 0 alone.
    final = work / "final"
    if main_process:
        shutil.rmtree(final, ignore_errors=True)
    trainer.save_model(str(final))  # the Trainer writes on the main process only
    if not main_process:
        trainer.accelerator.wait_for_everyone()  # until rank 0 has committed the stage
        return {}
    processor.save_pretrained(str(final))
    timings["total_s"] = time.time() - started
    trained_names = _trained_parameter_names(model)
    manifest = {
        **_identity(plan, stage),
        "format": "peft_adapter" if stage.settings.get("lora") else "full",
        "base_location": base_location,
        "model_entry": entry,
        "architecture": architecture,
        "config": stage.settings,
        "data": stage.data,
        "dtype": stage.dtype,
        "placement": _plain(placement),
        "quantization": {
            "bits": stage.quant_bits,
            "settings": stage.quantization,
            "fallback": placement.quantization_fallback,
        },
        "trained_components": stage.trained + stage.lora_components,
        "frozen_components": stage.frozen,
        "trainable_report": report,
        "census": dtype_census,
        "trained_parameters": trained_names,
        "trained_checksums": {}
        if stage.settings.get("lora")
        else handoff_checksums(model, trained_names),
        "handoff": handoff,
        "metrics": metrics,
        "world_size": trainer.args.world_size,
        "timings": timings,
        "versions": {name: _version(name) for name in LIBRARIES}
        | {"python": platform.python_version()},
    }
    write_json(final / "manifest.json", manifest)
    shutil.copy(work / "metrics.jsonl", final / "metrics.jsonl")
    output = store.commit(stage.fingerprint, final)
    shutil.rmtree(work, ignore_errors=True)  # checkpoints are no longer needed once committed
    log.info("stage %s: committed %s", stage.name, output)
    trainer.accelerator.wait_for_everyone()
    return manifest


def evaluate_stage(plan: RecipePlan, stage: StagePlan, store: Store) -> dict[str, Any]:
    """An evaluation stage: generate on the held-out split, store predictions and metrics."""
    started = time.time()
    entry = stage.model
    if not is_main_process():  # generation is per-process work; rank 0 does it once
        return {}
    location, _ = _init_location(plan, stage, store)
    model = load_pretrained(
        location, entry, dtype=stage.dtype, device_map=stage.placement.device_map
    )
    processor = load_processor(location, entry["kind"], entry)
    _pad_token_fallback(processor)
    splits = load_splits(stage.data, kind=entry["kind"], seed=plan.config["seed"])
    if splits.eval is None:
        raise RecipeError(
            f"Evaluation stage `{stage.name}` needs a held-out split: set data.eval_split "
            "to a split your data has, or data.eval_fraction=0.1.",
            key="data.eval_split",
        )
    rows = _capped(splits.eval, plan.config["eval"]["max_samples"])
    from recipe_engine.evaluation import exact_match

    generation = ("max_new_tokens", "batch_size", "do_sample", "temperature", "top_p")
    settings = {k: plan.config["eval"][k] for k in generation}
    result = exact_match(
        model, processor, rows, entry["kind"], seed=plan.config["seed"], **settings
    )
    final = store.work_dir(stage.fingerprint) / "final"
    shutil.rmtree(final, ignore_errors=True)
    final.mkdir(parents=True)
    with (final / "predictions.jsonl").open("w") as handle:
        handle.writelines(json.dumps(p) + "\n" for p in result["predictions"])
    manifest = {
        **_identity(plan, stage),
        "format": "evaluation",
        "evaluated": location,
        "model_entry": entry,
        "dtype": stage.dtype,
        "config": stage.settings,
        "data": stage.data,
        "eval_settings": plan.config["eval"],
        "trained_components": [],
        "metrics": {"eval_accuracy": result["accuracy"], "eval_samples": len(rows)},
        "timings": {"total_s": time.time() - started},
        "versions": {name: _version(name) for name in LIBRARIES}
        | {"python": platform.python_version()},
    }
    write_json(final / "manifest.json", manifest)
    store.commit(stage.fingerprint, final)
    shutil.rmtree(store.work_dir(stage.fingerprint), ignore_errors=True)
    return manifest


def _identity(plan: RecipePlan, stage: StagePlan) -> dict[str, Any]:
    """The manifest fields that place a stage output in its recipe and graph."""
    parent = plan.stages[stage.parent].fingerprint if stage.parent else None
    return {
        "stage": stage.name,
        "recipe": plan.recipe,
        "fingerprint": stage.fingerprint,
        "parent": stage.parent,
        "parent_fingerprint": parent,
    }


def _init_location(plan: RecipePlan, stage: StagePlan, store: Store):
    """(location to load, handoff info or None) for a stage's init."""
    if stage.parent:
        parent = plan.stages[stage.parent]
        parent_dir = store.entry(parent.fingerprint)
        parent_manifest = read_manifest(parent_dir)
        if is_adapter_folder(parent_dir):
            merged, expected = merge_adapter_parent(
                parent_dir, stage.dtype, store.merged_dir(parent.fingerprint, stage.dtype)
            )
            return str(merged), (stage.parent, expected)
        return str(parent_dir), (stage.parent, parent_manifest["trained_checksums"])
    init = stage.settings.get("init") or {}
    if init.get("path"):
        path = Path(init["path"]).expanduser().resolve()
        if is_adapter_folder(path):
            merged_dir = store.merged_dir(canonical_hash(stage.source_identity), stage.dtype)
            return str(merge_adapter_parent(path, stage.dtype, merged_dir)[0]), None
        return str(path), None
    return model_location(stage.model), None


def _config_of(location: str, entry: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        location,
        revision=entry.get("revision"),
        trust_remote_code=bool(entry.get("trust_remote_code")),
    )


def _module_names(config: Any, kind: str) -> list[str]:
    from recipe_engine.modeling import meta_model

    return [name for name, _ in meta_model(config, kind).named_modules()]


def _pad_token_fallback(processor: Any) -> None:
    tokenizer = getattr(processor, "tokenizer", processor)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        log.warning(
            "tokenizer has no pad token: using the EOS token %r for padding", tokenizer.eos_token
        )


def _trained_parameter_names(model: Any) -> list[str]:
    """Names, in the base model's naming, of the weights this stage changed."""
    names = set()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        name = name.removeprefix("base_model.model.")
        if ".lora_" in name:  # merged into the base weight of the same module
            module = name.split(".lora_")[0]
            names.add(f"{module}.weight")
            continue
        names.add(name.replace(".modules_to_save.default", ""))
    return sorted(names)


def _capped(rows: Any, limit: int | None) -> Any:
    return rows if limit is None or len(rows) <= limit else rows.select(range(limit))


def _accuracy(
    model: Any, processor: Any, rows: Any, entry: dict[str, Any], plan: RecipePlan
) -> float:
    from recipe_engine.evaluation import exact_match

    generation = ("max_new_tokens", "batch_size", "do_sample", "temperature", "top_p")
    settings = {k: plan.config["eval"][k] for k in generation}
    return exact_match(model, processor, rows, entry["kind"], seed=plan.config["seed"], **settings)[
        "accuracy"
    ]


def _base_accuracy(
    location: str, entry: dict[str, Any], stage: StagePlan, rows: Any, plan: RecipePlan
) -> float:
    """Held-out exact match of the untrained base, for the summary's before/after line."""
    model = load_pretrained(
        location, entry, dtype=stage.dtype, device_map=stage.placement.device_map
    )
    processor = load_processor(location, entry["kind"], entry)
    _pad_token_fallback(processor)
    return _accuracy(model, processor, rows, entry, plan)


def _plain(obj: Any) -> Any:
    from dataclasses import asdict

    return asdict(obj)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
