"""Export a committed stage as a folder the stock Auto classes load from anywhere.

Inside the store an adapter names its base as a store-relative path (`./<key>`), which loads
only from the store folder. An export is standalone: merged weights in the stage's dtype
(checked against the adapter's logits, as handoff merges are), the full weights of a full
fine-tune, or the adapter with its base named as the user will find it (a hub id at its
pinned revision, or a folder the user names). The tokenizer or processor, chat template and
generation config go with it, and a model card. The folder is written aside and renamed into
place; what was written is loaded back with the stock Auto class before it is kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject, atomic_write_text
from recipe_engine.store.records import EVALUATION, Manifest
from recipe_engine.store.stage_records import HandoffCounts, MergeCheck
from recipe_engine.store.store import (
    COMPLETE,
    ENGINE_MARKER,
    KEY_LENGTH,
    is_engine_folder,
    make_engine_folder,
)

# Files of a stage folder that are the engine's records, not the model's.
ENGINE_FILES = {
    "manifest.json",
    "handoff.json",
    "merge_check.json",
    "metrics.jsonl",
    "trainer_state.json",
    "training_args.bin",
    "README.md",  # PEFT's stub card; the export writes its own
    COMPLETE,
    ENGINE_MARKER,
}
MODEL_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model", ".tiktoken")
EXPORT_RECORD = "export.json"
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


@dataclass(frozen=True)
class ExportRequest:
    source: Path  # the stage's folder in the store
    to: Path | None = None  # None: <output_root>/exports/<recipe>-<stage>-<key>-<form>
    merge: bool = True
    base: str | None = None  # merge=false: the base adapter_config.json names


@dataclass(frozen=True)
class ExportPlan:
    request: ExportRequest
    lineage: list[Manifest]  # root stage first, the exported stage last
    form: str  # merged | full | adapter
    to: Path
    base: str  # the model the weights descend from, as the card names it
    base_revision: str | None
    adapter_base: str | None  # form == adapter: what adapter_config.json names

    @property
    def manifest(self) -> Manifest:
        return self.lineage[-1]


def stage_lineage(folder: Path) -> list[Manifest]:
    """The stage's manifest and its ancestors', root first (each parent in the same store)."""
    chain = [Manifest.load(folder)]
    while chain[0].parent_fingerprint:
        parent = folder.parent / chain[0].parent_fingerprint[:KEY_LENGTH]
        if not (parent / "manifest.json").is_file():
            break  # removed by `runs gc`: the card lists what is left
        chain.insert(0, Manifest.load(parent))
    return chain


def decide_export(request: ExportRequest) -> ExportPlan:
    """What the export will be, checked before anything is written."""
    lineage = stage_lineage(request.source)
    final = lineage[-1]
    if final.format == EVALUATION:
        raise RecipeError(
            f"Stage `{final.stage}` only evaluates (it holds no weights): export "
            f"`{final.parent or 'its model'}` instead."
        )
    adapter = (request.source / "adapter_config.json").is_file()
    form = "adapter" if adapter and not request.merge else "merged" if adapter else "full"
    to = request.to or default_destination(request.source, final, form)
    _check_destination(to, request.source)
    model = final.model
    init = lineage[0].config.get("init") or {}
    hub_root = model.source == "hub" and not init.get("path")
    base = model.id if hub_root else model.name or model.id
    revision = model.revision if hub_root else None
    if form != "adapter":
        return ExportPlan(request, lineage, form, to, base, revision, None)
    adapter_base = _adapter_base(request, final, base if hub_root and not final.parent else None)
    return ExportPlan(request, lineage, form, to, base, revision, adapter_base)


def default_destination(source: Path, final: Manifest, form: str) -> Path:
    root = source.parent.parent  # <output_root>/store/<key>
    return root / "exports" / f"{final.recipe}-{final.stage}-{final.fingerprint[:12]}-{form}"


def _adapter_base(request: ExportRequest, final: Manifest, hub_base: str | None) -> str:
    if request.base:
        named = Path(request.base).expanduser()
        if not named.exists() and not HUB_ID.fullmatch(request.base):
            raise RecipeError(
                f"`base={request.base}` is neither a folder here nor a hub id (ORG/NAME).",
                key="base",
            )
        if named.exists():
            if not (named / "config.json").is_file():
                raise RecipeError(
                    f"`base={request.base}` has no config.json: name the folder of a full model "
                    "(an `export` of the parent stage), or a hub id.",
                    key="base",
                )
            return str(named.resolve())
        return request.base
    if hub_base:
        return hub_base
    origin = f"stage `{final.parent}`'s output" if final.parent else "a local folder"
    export_base = f"export RUN_DIR:{final.parent} to=DIR" if final.parent else "copy it to DIR"
    raise RecipeError(
        f"Stage `{final.stage}`'s adapter applies to {origin}, which only this machine holds: "
        "an exported adapter must name where its base will be. Export that base too "
        f"(`{export_base}`) and add `base=DIR` (or the base's hub id once pushed), or export "
        "merged weights (merge=true, the default).",
        key="base",
    )


def _check_destination(to: Path, source: Path) -> None:
    if to.resolve().is_relative_to(source.resolve()):
        raise RecipeError(f"`to={to}` is inside the stage's store folder; choose another.")
    if to.exists() and not (to.is_dir() and (is_engine_folder(to) or not any(to.iterdir()))):
        raise RecipeError(
            f"`to={to}` exists and was not written by an export: choose another folder (the "
            "engine never overwrites what it did not write).",
            key="to",
        )


@dataclass(frozen=True)
class LoadedBack:
    """The export loaded back as a user would: the class that loaded it and, for full
    weights, the stage's trained parameters found in it with their values."""

    loaded_with: str
    trained_parameters_checked: HandoffCounts | None


@dataclass(frozen=True)
class ExportRecord:
    """What `export.json` says: the form, the stage, how its merge checked, how it loaded."""

    form: str
    stage: str
    check: MergeCheck | None  # a merged adapter's
    loaded: LoadedBack

    def to_json(self) -> JsonObject:
        counts = self.loaded.trained_parameters_checked
        return {
            "form": self.form,
            "stage": self.stage,
            "check": self.check.to_json() if self.check else {},
            "loaded_with": self.loaded.loaded_with,
            "trained_parameters_checked": asdict(counts) if counts else {},
        }


def write_export(plan: ExportPlan, card: str) -> Path:
    """Build the folder aside, load it back with the stock Auto class, then put it in place."""
    to = plan.to
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = to.with_name(f".{to.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        make_engine_folder(tmp)
        check = _write_weights(plan, tmp)
        atomic_write_text(tmp / "README.md", card)
        record = ExportRecord(plan.form, plan.manifest.stage, check, load_back(tmp, plan))
        atomic_write_text(tmp / EXPORT_RECORD, json.dumps(record.to_json(), indent=2) + "\n")
        _replace(tmp, to)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return to


def _write_weights(plan: ExportPlan, into: Path) -> MergeCheck | None:
    """The export's weights written into `into`; a merged adapter's merge check."""
    source, final = plan.request.source, plan.manifest
    if plan.form == "merged":
        from recipe_engine.run.loading import merge_adapter_parent

        scratch = into / ".merge"
        merged = merge_adapter_parent(source, final.dtype, scratch, final.stage)
        _copy_model_files(scratch, into)
        shutil.rmtree(scratch)
        return merged.check
    _copy_model_files(source, into)
    if plan.form == "adapter":
        from recipe_engine.run.loading import name_adapter_base

        name_adapter_base(into, str(plan.adapter_base), plan.base_revision)
    return None


def _copy_model_files(source: Path, into: Path) -> None:
    for item in sorted(source.iterdir()):
        if item.is_file() and item.name not in ENGINE_FILES and item.suffix in MODEL_SUFFIXES:
            shutil.copy2(item, into / item.name)


def load_back(folder: Path, plan: ExportPlan) -> LoadedBack:
    """Load the export as a user would (stock Auto classes, from the folder alone) and run one
    forward; for full weights, every parameter the stage trained must carry its values."""
    import torch

    from recipe_engine.run.loading import check_handoff
    from recipe_engine.run.merge_check import probe_ids, probe_logits

    model = _auto_load(folder, plan)
    logits = probe_logits(model, probe_ids(model.config))
    if not torch.isfinite(logits).all():
        raise RecipeError(f"The exported model in {folder} gives non-finite logits.")
    counts = None
    if plan.form == "full" and plan.manifest.trained_checksums:
        counts = check_handoff(model, plan.manifest.trained_checksums, plan.manifest.stage)
    return LoadedBack(type(model).__name__, counts)


def _auto_load(folder: Path, plan: ExportPlan) -> Any:
    """As the model card tells a user to: the Auto class of the model's kind; an adapter of a
    causal LM through PEFT's AutoPeftModelForCausalLM, a VLM's onto its base (PEFT has no
    Auto class for image-text-to-text)."""
    from recipe_engine.resolve.models import auto_model_class
    from recipe_engine.run.loading import torch_dtype

    dtype, kind = torch_dtype(plan.manifest.dtype), plan.manifest.kind
    if plan.form != "adapter":
        return auto_model_class(kind).from_pretrained(str(folder), dtype=dtype)
    import peft

    if kind != "vlm":
        return peft.AutoPeftModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    base = auto_model_class(kind).from_pretrained(
        str(plan.adapter_base), revision=plan.base_revision, dtype=dtype
    )
    return peft.PeftModel.from_pretrained(base, str(folder))


def _replace(tmp: Path, to: Path) -> None:
    """Put the new export in place; an earlier export there (the engine's) goes aside first."""
    if to.exists():
        old = to.with_name(f".{to.name}.{os.getpid()}.old")
        os.rename(to, old)
        os.rename(tmp, to)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, to)
