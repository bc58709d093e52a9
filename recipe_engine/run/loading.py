"""Resolve a stage's init and load it: hub id | local path | parent stage output.

Handoff rules: a full-weights parent loads directly and the child quantizes on load if it
asks to; an adapter parent is first merged into its base in the compute dtype (never into
a 4-bit model) and saved, then the child loads the merged weights. Afterwards every
parameter trained upstream is checked against the parent's recorded checksums.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recipe_engine.config.schema import ModelConfig, RecipeSection
from recipe_engine.errors import RecipeError, StageFailed, did_you_mean
from recipe_engine.files import atomic_write_text, share_as_umask
from recipe_engine.hashing import canonical_hash
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.resolve.hub_models import download_model
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.resolve.models import auto_model_class
from recipe_engine.resolve.sources import PARENT
from recipe_engine.run.merge_check import MERGE_CHECK, check_merge, reference, tensor_bytes_hash
from recipe_engine.store.records import Manifest
from recipe_engine.store.stage_records import Checksums, HandoffCounts, MergeCheck, known_fields
from recipe_engine.store.store import Store, make_engine_folder

log = logging.getLogger("recipe_engine")

HANDOFF = "handoff.json"
# How long the other ranks of a launch wait for rank 0 to merge an adapter parent (the
# Trainer's default `ddp_timeout`).
MERGE_WAIT_S = 1800


class HandoffError(RuntimeError):
    """A parameter trained upstream did not arrive downstream: the engine stops the recipe."""


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def is_adapter_folder(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def name_adapter_base(folder: Path, base: str, revision: str | None) -> None:
    """Name `base` (with its hub revision) as the base of the adapter saved in `folder`.

    PEFT records the path the base was loaded from, so an adapter on a parent stage named an
    absolute path into this store and no longer loaded once outputs/ was moved or copied.
    `base` is what the manifest records: a hub id, `./<key>` or `./<key>.merged-<dtype>`
    relative to the store, or a folder outside the store (a user's path; the machine-local
    cache of a tiny model or converted GGUF file, which `Manifest.loadable_base` rebuilds).
    transformers and PEFT resolve a relative path against the current directory, so
    `AutoPeftModel*.from_pretrained("<key>")` works from the store folder; the engine's readers
    resolve it against the adapter's store first (`plan.model_files.adapter_base_location`);
    `PeftModel.from_pretrained(base, folder)` uses the base it is given. The model card's
    `base_model` metadata, written from the same path, names the same base.
    """
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    recorded = config.get("base_model_name_or_path")
    config["base_model_name_or_path"] = base
    if revision is not None:  # AutoPeftModel loads the base at this revision
        config["revision"] = revision
    atomic_write_text(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")
    card = folder / "README.md"
    if isinstance(recorded, str) and recorded and recorded != base and card.is_file():
        atomic_write_text(card, card.read_text().replace(recorded, base))


def load_processor(location: str, model: ModelConfig) -> Any:
    """The processor (VLM) or tokenizer (causal LM), with a pad token for batching; a VLM's
    with the model entry's `processor` settings over its saved config."""
    from transformers import AutoProcessor, AutoTokenizer

    vlm = model.kind == "vlm"
    settings = dict(model.processor) if vlm else {}
    cls = AutoProcessor if vlm else AutoTokenizer
    processor = cls.from_pretrained(
        location, revision=model.revision, trust_remote_code=model.trust_remote_code, **settings
    )
    _check_processor_settings(processor, settings)
    pad_token_fallback(processor)
    return processor


def _check_processor_settings(processor: Any, settings: RecipeSection) -> None:
    """from_pretrained drops a setting neither the processor nor its image processor takes
    (a misspelt `max_pixel` would train at the default limits): refuse it instead."""
    image_processor = getattr(processor, "image_processor", None)
    taken = set(inspect.signature(type(processor).__init__).parameters)
    if image_processor is not None:
        valid = getattr(image_processor, "valid_kwargs", None)
        taken |= set(getattr(valid, "__annotations__", {})) | set(vars(image_processor))
    for key in settings:
        if key not in taken:
            names = f"{type(processor).__name__} or its {type(image_processor).__name__}"
            raise RecipeError(
                f"`model.processor.{key}` is not a setting of {names}."
                f"{did_you_mean(key, sorted(taken))} Remove it, or name one they take.",
                key=f"model.processor.{key}",
            )


def pad_token_fallback(processor: Any) -> None:
    """Batches need a pad token; a tokenizer without one pads with EOS (and says so)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        log.warning(
            "tokenizer has no pad token: using the EOS token %r for padding", tokenizer.eos_token
        )


def load_pretrained(
    location: str,
    model: ModelConfig,
    *,
    dtype: str,
    device_map: Any,
    quantization_config: Any = None,
) -> Any:
    """`from_pretrained` with the engine's safety defaults (no remote code, safetensors only)."""
    cls = auto_model_class(model.kind)
    if model.source == "hub" and location == model.id:
        download_model(location, model.revision, allow_pickle=model.allow_pickle)
    try:
        return cls.from_pretrained(
            location,
            revision=model.revision,
            dtype=torch_dtype(dtype),
            device_map=device_map,
            quantization_config=quantization_config,
            trust_remote_code=model.trust_remote_code,
            use_safetensors=None if model.allow_pickle else True,
        )
    except OSError as error:
        hint = (
            " Only safetensors weights are loaded; if you trust this checkpoint's pickle files "
            "set model.allow_pickle=true."
            if "safetensors" in str(error)
            else ""
        )
        raise RecipeError(
            f"Could not load a model from {location}: {str(error).splitlines()[0]}{hint}",
            key="model.id",
        ) from None


@dataclass(frozen=True)
class MergedParent:
    """An adapter merged into its base: the folder, what it trained, how the merge checked."""

    folder: Path
    expected: Checksums  # of every weight the adapter changed
    check: MergeCheck  # as `merge_check.json` records it


def merge_adapter_parent(
    parent: Path, dtype: str, into: Path, stage: str | None = None
) -> MergedParent:
    """Merge a parent stage's LoRA adapter into its base in the compute dtype, save it, and
    verify it (`merge_check`) before any child uses it.

    The merged folder is kept (it is the base a child adapter applies to) and reused by
    later children; `handoff.json` beside the weights holds the checksums of every weight
    the adapter changed, `merge_check.json` what the verification measured. A folder without
    the latter (an older engine's, or one whose writer died) is verified on first use.
    """
    if not is_main_process():
        _wait_for_merge(into)
    elif not (into / HANDOFF).is_file():
        _merge(parent, dtype, into)
    expected = json.loads((into / HANDOFF).read_text())
    return MergedParent(into, expected, _verified(parent, dtype, into, stage or str(parent)))


def _wait_for_merge(into: Path) -> None:
    """Rank 0 merges and verifies; the other ranks of a launch wait for its record. In a
    process group `save_pretrained` writes weights on rank 0 only, so a merge another rank
    saved first held no weights, and the stage failed to load it ("Unrecognized model")."""
    deadline = time.monotonic() + MERGE_WAIT_S
    while not (into / MERGE_CHECK).is_file():
        if time.monotonic() > deadline:
            raise StageFailed(
                f"Rank {os.environ.get('RANK')} waited {MERGE_WAIT_S} s for rank 0 to merge and "
                f"verify {into}; rank 0's log says why it did not."
            )
        time.sleep(0.2)


def _merge(parent: Path, dtype: str, into: Path) -> None:
    """Written aside and renamed into place, like a stage output."""
    from peft import PeftModel

    manifest = Manifest.load(parent)
    entry = manifest.model
    base_location = manifest.loadable_base(parent.parent)
    base = load_pretrained(base_location, entry, dtype=dtype, device_map={"": "cpu"})
    merged = PeftModel.from_pretrained(base, str(parent)).merge_and_unload()
    expected = handoff_checksums(merged, manifest.trained_parameters)
    tmp = into.with_name(f".{into.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        make_engine_folder(tmp)
        merged.save_pretrained(tmp, safe_serialization=True)
        load_processor(str(parent), entry).save_pretrained(tmp)
        (tmp / HANDOFF).write_text(json.dumps(expected))
        share_as_umask(tmp)  # safetensors writes 0600: children of a shared store load it too
    except BaseException:  # a full disk, a kill: the store as it was, no half-written merge
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.rename(tmp, into)
    except OSError:  # another process merged it first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)


def _verified(parent: Path, dtype: str, into: Path, stage: str) -> MergeCheck:
    """The merge check of `into`, run once and recorded in the folder; a failing merge is
    set aside (never reused as if valid) and refused. The parent's adapter is untouched."""
    record = into / MERGE_CHECK
    if record.is_file():
        return MergeCheck(**known_fields(MergeCheck, json.loads(record.read_text())))
    from peft import PeftModel

    manifest = Manifest.load(parent)
    entry, cpu = manifest.model, {"": "cpu"}
    base = load_pretrained(
        manifest.loadable_base(parent.parent), entry, dtype=dtype, device_map=cpu
    )
    ref = reference(base, lambda model: PeftModel.from_pretrained(model, str(parent)))
    del base  # one model in memory at a time: the merged one loads next
    merged = load_pretrained(str(into), entry, dtype=dtype, device_map=cpu)
    try:
        check = check_merge(ref, merged, dtype, stage)
    except StageFailed:
        _set_aside(into)
        raise
    atomic_write_text(record, json.dumps(check.to_json(), indent=2) + "\n")
    log.info("merge of %s verified: %s", stage, check)
    return check


def _set_aside(folder: Path) -> None:
    """Remove a merged folder that failed its check, by way of a `.stale` name (what gc
    cleans up should the removal itself be interrupted)."""
    stale = folder.with_name(f"{folder.name}.{os.getpid()}.stale")
    try:
        os.rename(folder, stale)
    except OSError:  # another process set it aside first
        return
    shutil.rmtree(stale, ignore_errors=True)


def is_quantized_param(param: torch.nn.Parameter) -> bool:
    return type(param).__name__ in ("Params4bit", "Int8Params")


CHECKSUM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def tensor_checksum(tensor: torch.Tensor, dtype: torch.dtype) -> str:
    return tensor_bytes_hash(tensor.detach().to("cpu", dtype))


def handoff_checksums(model: Any, names: list[str]) -> Checksums:
    """Checksums of the named parameters as a child will load them, in each float dtype.

    Recorded by runtime parameter name: transformers may rename keys on save, so the
    child compares what it loaded, not the file's keys.
    """
    params = dict(model.named_parameters())
    return {
        name: {str(d): tensor_checksum(params[name], d) for d in CHECKSUM_DTYPES}
        for name in names
        if name in params
    }


def check_handoff(model: Any, expected: Checksums, parent: str) -> HandoffCounts:
    """Every parameter the parent trained arrived here with the parent's values.

    Parameters the child quantizes on load are checked for presence only (4/8-bit storage
    changes their bytes by design). Returns the counts the manifest records.
    """
    params = dict(model.named_parameters())
    missing = [name for name in expected if name not in params]
    if missing:
        raise HandoffError(
            f"{len(missing)} parameter(s) trained in stage `{parent}` are missing after loading "
            f"its output, e.g. {missing[:3]}. The parent's output is incomplete or the model "
            "class dropped them."
        )
    changed, quantized = [], 0
    for name, sums in expected.items():
        param = params[name]
        if is_quantized_param(param):
            quantized += 1
        elif tensor_checksum(param, param.dtype) != sums.get(str(param.dtype)):
            changed.append(name)
    if changed:
        raise HandoffError(
            f"{len(changed)} parameter(s) trained in stage `{parent}` did not arrive with the "
            f"values it saved, e.g. {changed[:3]}. The handoff lost the parent's training."
        )
    return HandoffCounts(checked=len(expected) - quantized, quantized_on_load=quantized)


@dataclass(frozen=True)
class Weights:
    """What a stage loads: the folder or hub id, and what its parent trained (to check)."""

    location: str
    parent: str | None = None
    expected: Checksums | None = None  # of the parent's training
    merge_check: MergeCheck | None = None  # an adapter parent's merge, as verified


def starting_folder(weights: Weights, revision: str | None) -> str:
    """The local folder the stage's starting weights were loaded from: a folder as it is, a
    hub model's snapshot at the revision the stage loaded (already in the local cache)."""
    if Path(weights.location).is_dir():
        return weights.location
    from huggingface_hub import snapshot_download

    return snapshot_download(weights.location, revision=revision, local_files_only=True)


def merge_parent(plan: RecipePlan, stage: StagePlan, store: Store) -> Weights:
    """The weights the stage starts from, as a loadable location. A step, not a query: a
    LoRA adapter it starts from (its parent's output, or an adapter folder as `init`) is
    merged into its base in the stage's compute dtype (never into a quantized model), written
    to the store (reused by the next stage that needs it) and verified against the adapter's
    logits (`plan` says so on the stage's `merge:` line); other sources are returned as they
    are, with what the parent trained (to check after loading)."""
    init = stage.init
    if init.kind == PARENT:
        return stage_output(plan.stages[str(init.parent)], stage.dtype, store)
    if init.adapter:
        into = store.merged_dir(canonical_hash(init.identity), stage.dtype)
        merged = merge_adapter_parent(Path(str(init.location)), stage.dtype, into)
        return Weights(str(merged.folder), merge_check=merged.check)
    return Weights(str(init.location))


def stage_output(parent: StagePlan, dtype: str, store: Store) -> Weights:
    """A stored stage's weights as another stage loads them in `dtype`: a LoRA adapter merged
    into its base (kept in the store, verified), full weights as they are; with what the
    stage trained, to check after loading."""
    folder = store.entry(parent.fingerprint)
    if is_adapter_folder(folder):
        into = store.merged_dir(parent.fingerprint, dtype)
        merged = merge_adapter_parent(folder, dtype, into, parent.name)
        return Weights(str(merged.folder), parent.name, merged.expected, merged.check)
    checksums = Manifest.load(folder, stage=parent.name).trained_checksums
    return Weights(str(folder), parent.name, checksums)


def load_input_stage(
    plan: RecipePlan, stage: StagePlan, source: StagePlan, role: str, store: Store
) -> Any:
    """Another stage's committed weights that `stage` loads beside its own (its teacher): an
    adapter merged into its base, in the stage's dtype and placement, frozen and in eval mode,
    its training checked as a child checks its parent's. A stage that only evaluates
    (`evaluate_only`) trained nothing: its weights are the model it evaluated, its `init` (a
    hub model, a folder, a tiny model: a model as the input)."""
    if source.evaluate_only:
        weights = merge_parent(plan, source, store)
    else:
        weights = stage_output(source, stage.dtype, store)
    log.info("stage %s: loading its %s %s", stage.name, role, weights.location)
    model = load_pretrained(
        weights.location, source.model, dtype=stage.dtype, device_map=stage.placement.device_map
    )
    check_handoff(model, weights.expected or {}, source.name)
    model.eval()
    model.requires_grad_(False)
    return model


def load_stage_model(stage: StagePlan, weights: Weights, quantization_config: Any) -> Any:
    return load_pretrained(
        weights.location,
        stage.model,
        dtype=stage.dtype,
        device_map=stage.placement.device_map,
        quantization_config=quantization_config,
    )


def load_stage_processor(stage: StagePlan, weights: Weights) -> Any:
    return load_processor(weights.location, stage.model)
