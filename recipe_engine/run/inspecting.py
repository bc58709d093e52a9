"""Loading what `inspect` looks at (a stage output, a folder, a model entry on the meta device)
and measuring it per component: parameters, stored dtypes, devices, trainable share,
bitsandbytes-quantized modules, LoRA adapters. `report.inspection` resolves the targets and
renders what this measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.config.choices import Dtype, values
from recipe_engine.config.components import Layout
from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import (
    canonical_name,
    component_of,
    groups,
    layout_for,
    report_layout,
)
from recipe_engine.store.records import Manifest
from recipe_engine.store.stage_records import ComponentCensus

DTYPES = values(Dtype)


@dataclass
class Target:
    """A resolved TARGET: what to load and what we know about it before loading."""

    label: str  # as the user wrote it
    kind: str  # stage | folder | adapter | entry
    path: Path | None
    # The model entry: a recipe's, a stage's (as its manifest records it), or one made up for
    # a folder (its dtype then the config's, not the entry's default).
    entry: ModelConfig
    manifest: Manifest | None = None


@dataclass(frozen=True)
class InspectOptions:
    """How the user asked `inspect` to load a target (its `key=value` words)."""

    dtype: str | None = None  # None: the stage's / model entry's / config's
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    weights: bool = False  # a model entry's real weights instead of the meta model
    device: str = "cpu"

    @property
    def bits(self) -> int | None:
        """Quantization on load: 4, 8, or None for none."""
        return 4 if self.load_in_4bit else 8 if self.load_in_8bit else None


@dataclass
class Row:
    """One component of one inspected model."""

    params: int = 0  # logical parameters (4-bit weights unpacked)
    dtypes: dict[str, int] = field(default_factory=dict)  # stored elements per dtype
    devices: list[str] = field(default_factory=list)
    requires_grad: int = 0  # as loaded
    stage_trainable: int | None = None  # from the stage manifest
    stage_params: int | None = None
    quantized: list[str] = field(default_factory=list)  # bitsandbytes module names
    lora: list[str] = field(default_factory=list)  # modules carrying LoRA adapters
    saved: list[str] = field(default_factory=list)  # PEFT modules_to_save


@dataclass
class Inspection:
    label: str
    description: list[str]
    architecture: str
    rows: dict[str, Row]  # component (or pattern group) -> row, report order, "total" last
    adapters: list[str] = field(default_factory=list)  # e.g. "default r=16"


def inspect_target(target: Target, options: InspectOptions) -> Inspection:
    """Load (or build on meta) the target as asked, and measure it per component."""
    from recipe_engine.resolve.models import load_config, meta_model, model_location

    config_at = target.path if target.kind != "entry" else None
    if target.kind == "adapter":  # the base's config (a GGUF entry's: its converted folder)
        local = target.entry.source == "local"
        config_at = Path(model_location(target.entry)) if local else None
    config = load_config(target.entry, config_at)
    if config is None:
        raise RecipeError(
            f"The config of `{target.label}` ({target.entry.id}) could not be read: the hub "
            "is unreachable (offline?) and it is not in the local cache. Connect (unset "
            "HF_HUB_OFFLINE), or inspect a local save_pretrained folder instead."
        )
    entry = target.entry
    layout = layout_for(config.model_type, entry.layout, entry.components)
    if target.manifest:
        layout = report_layout(layout, target.manifest.config["freeze"]["patterns"])
    dtype = options.dtype or _default_dtype(target, config)
    bits = options.bits
    meta_only = target.kind == "entry" and not (bits or options.weights)
    meta = meta_model(config, target.entry.kind, dtype=dtype)
    description = [_describe(target)]
    if meta_only:
        model = meta
        description.append(f"built from its config on the meta device (no weights), {dtype}")
    else:
        how = LoadAs(dtype, bits, options.device)
        model = _load(target, meta, layout, how)
        quant = f"{bits}-bit (bitsandbytes, language model)" if bits else "none"
        description.append(f"loaded: dtype {dtype}, device {options.device}, quantization {quant}")
    if target.manifest:
        description.append(_stage_summary(target.manifest))
        trained_bits = target.manifest.bits
        if trained_bits != "none" and not bits:
            description.append(
                f"(inspected unquantized; add load_in_{trained_bits}=true to see it as trained)"
            )
    rows, adapters = measure(model, layout, target.manifest)
    return Inspection(target.label, description, layout.name, rows, adapters)


def _default_dtype(target: Target, config: Any) -> str:
    if target.manifest and target.manifest.dtype in DTYPES:
        return target.manifest.dtype
    if target.kind == "entry" or target.manifest:  # an entry made up for a folder has none
        return str(target.entry.dtype)
    stored = str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
    return stored if stored in DTYPES else "float32"


@dataclass(frozen=True)
class LoadAs:
    """How `inspect` loads weights: dtype, quantization bits (None: none) and device."""

    dtype: str
    bits: int | None
    device: str


def _load(target: Target, meta: Any, layout: Layout, how: LoadAs) -> Any:
    from recipe_engine.resolve.models import model_location
    from recipe_engine.run.loading import load_pretrained

    dtype, bits, device = how.dtype, how.bits, how.device
    quant_config = None
    if bits:
        from recipe_engine.plan.policies.quant import quantization_plan
        from recipe_engine.run.policies import bnb_config

        # The stages' own policy: only the language model is quantized.
        quant = {"load_in_4bit": True, "bnb_4bit_compute_dtype": dtype} if bits == 4 else {}
        quant = quant or {"load_in_8bit": True}
        names = [n for n, _ in meta.named_modules()]
        planned = quantization_plan(quant, layout=layout, module_names=names, trained=[])
        quant_config = bnb_config(planned)
    if target.kind == "entry":
        location = model_location(target.entry)
    elif target.kind == "adapter":
        location = _stage_base(target) or model_location(target.entry)
    else:
        location = str(target.path)
    device_map = {"": 0 if device == "cuda" else "cpu"}
    try:
        model = load_pretrained(
            location,
            target.entry,
            dtype=dtype,
            device_map=device_map,
            quantization_config=quant_config,
        )
        if target.kind == "adapter":
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(target.path))
    except (OSError, ValueError, RuntimeError) as error:  # corrupt weights or adapter files
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RecipeError(f"Could not load `{target.label}` from {location}: {first}") from None
    return model


def _describe(target: Target) -> str:
    if target.manifest:
        fmt = "LoRA adapter" if target.kind == "adapter" else "full weights"
        base = f" on {_stage_base(target)}" if target.kind == "adapter" else ""
        return (
            f"stage `{target.manifest.stage}` of recipe {target.manifest.recipe}: "
            f"{fmt}{base} ({target.path})"
        )
    if target.kind == "entry":
        return f"model entry {target.label}: {target.entry.source} {target.entry.id}"
    if target.kind == "adapter":
        return f"PEFT adapter {target.path} on {target.entry.id}"
    return f"save_pretrained folder {target.path}"


def _stage_base(target: Target) -> str | None:
    """A stage output's recorded base (store-relative in new manifests) as a loadable path."""
    if target.manifest is None or target.path is None:
        return None
    return target.manifest.loadable_base(target.path.parent)  # entries live at <store>/<key>/


def _stage_summary(manifest: Manifest) -> str:
    trained = manifest.trained_text()  # what had trainable parameters
    frozen = ", ".join(manifest.frozen_components) or "-"
    quant = manifest.bits
    return f"the stage trained: {trained}; froze: {frozen}; trained with quantization {quant}"


def measure(
    model: Any, layout: Layout, manifest: Manifest | None = None
) -> tuple[dict[str, Row], list[str]]:
    """Per-component rows (+ "total") and the LoRA adapters (name and rank) of a model."""
    from recipe_engine.resolve.inventory import quantized_modules
    from recipe_engine.run.census import census, trainable_report

    report = trainable_report(model, layout=layout)
    cells = census(model, layout=layout)
    stage_report = manifest.trainable_report if manifest else {}
    rows: dict[str, Row] = {}
    for component in (*groups(layout), "total"):
        if component not in report and component not in stage_report:
            continue
        row = Row()
        if component in report:
            row.params = report[component].params
            row.requires_grad = report[component].trainable
        cell = cells.get(component, ComponentCensus())
        row.dtypes = {k.removeprefix("torch."): v for k, v in cell.dtype.items()}
        row.devices = sorted(cell.device)
        if component in stage_report:
            row.stage_trainable = stage_report[component].trainable
            row.stage_params = stage_report[component].params
        rows[component] = row
    for name in quantized_modules(model):
        rows[component_of(name, layout)].quantized.append(canonical_name(name))
    adapters: dict[str, set[int]] = {}
    for name, module in model.named_modules():
        if type(module).__name__ == "ModulesToSaveWrapper":
            rows[component_of(name, layout)].saved.append(canonical_name(name))
        lora_a = getattr(module, "lora_A", None)
        if lora_a is not None and len(lora_a) and hasattr(module, "r"):
            rows[component_of(name, layout)].lora.append(canonical_name(name))
            for adapter in lora_a:
                adapters.setdefault(adapter, set()).add(module.r[adapter])
    total = rows["total"]
    for component, row in rows.items():
        if component != "total":
            total.quantized += row.quantized
            total.lora += row.lora
            total.saved += row.saved
            for dtype, n in row.dtypes.items():
                total.dtypes[dtype] = total.dtypes.get(dtype, 0) + n
            total.devices = sorted(set(total.devices) | set(row.devices))
    names = [f"`{a}` r={'/'.join(str(r) for r in sorted(rs))}" for a, rs in adapters.items()]
    return rows, names
