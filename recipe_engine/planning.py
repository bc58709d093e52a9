"""Recipe -> plan: every stage validated, fingerprinted and placed, before any weight loads.

This is what `plan` prints and what `run` executes. Checks that need module names use the
model built on the meta device from its config (no weights read).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from recipe_engine import dag, validate
from recipe_engine.components import COMPONENTS, validate_components
from recipe_engine.config import to_plain
from recipe_engine.data import data_identity
from recipe_engine.errors import RecipeError
from recipe_engine.hardware import Machine, detect_machine, parse_gpus, profile_gpus
from recipe_engine.placement import (
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    describe,
    plan_placement,
)
from recipe_engine.store import write_json

# Training memory per trainable parameter: fp32 gradient + two AdamW moments.
TRAINABLE_BYTES = 12
BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "float16": 2, "4bit": 0.5, "8bit": 1}


@dataclass
class ModelInventory:
    """What the checks need to know of a model, read from its config on the meta device."""

    model_type: str
    architecture: str
    param_counts: dict[str, int]  # component -> parameters
    linear_modules: list[str] = field(default_factory=list)
    meta_model: Any = None


@dataclass
class StagePlan:
    name: str
    fingerprint: str
    parent: str | None
    source: str  # human description of where weights come from
    source_identity: Any
    model: dict[str, Any]  # the model entry the stage's weights descend from
    data: dict[str, Any]
    frozen: list[str]
    trained: list[str]  # fully trained components
    lora_components: list[str]
    lora_targets: list[str]
    quantization: dict[str, Any] | None
    quant_bits: str
    dtype: str
    settings: dict[str, Any]
    placement: PlacementPlan
    notes: list[str] = field(default_factory=list)


@dataclass
class RecipePlan:
    recipe: str
    config: dict[str, Any]
    graph: dag.StageGraph
    stages: dict[str, StagePlan]
    machine: Machine
    hardware: str
    notes: list[str] = field(default_factory=list)

    @property
    def cuda_visible_devices(self) -> str | None:
        values = {s.placement.cuda_visible_devices for s in self.stages.values()}
        return values.pop() if len(values) == 1 else None


def plan_from_config(
    cfg: DictConfig | Mapping[str, Any], machine: Machine | None = None
) -> RecipePlan:
    plain = to_plain(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    return plan_recipe(plain, machine or detect_machine())


def plan_recipe(cfg: dict[str, Any], machine: Machine) -> RecipePlan:
    stages = {name: _resolve_dtypes(stage, cfg["model"]) for name, stage in cfg["stage"].items()}
    graph = dag.build_graph(stages, cfg["recipe"].get("targets") or [])
    for name in cfg.get("only") or []:
        _check_stage_name(name, stages, "only")
    for name in cfg.get("force") or []:
        _check_stage_name(name, stages, "force")

    sources = {name: _source(name, stages[name], cfg) for name in graph.order}
    datas = {name: stages[name].get("data") or cfg["data"] for name in graph.order}

    inventories: dict[str, ModelInventory | None] = {}
    result: dict[str, StagePlan] = {}
    notes: list[str] = []
    for name in graph.order:
        stage = stages[name]
        root = graph.root_of(name)
        model = sources[root][2]
        _check_stage_settings(name, stage)
        if stage.get("evaluate_only"):
            policy = _evaluation_policy(name, stage, graph, stages)
        else:
            policy = _checked_policies(name, stage, model, sources[root][3], inventories)
        dtype = stage["dtype"]
        bits = validate.quant_bits(stage.get("quantization"))
        request = _placement_request(
            cfg, machine, stage, bits, _footprint_gib(policy, model, dtype, bits)
        )
        if request.parallel == "deepspeed":
            _require("deepspeed", "parallel=deepspeed")
        try:
            placement = plan_placement(request)
        except PlacementRefused as refusal:  # name the stage's own quantization keys
            text = str(refusal).replace("`quantization=none`", f"`~stage.{name}.quantization`")
            text = re.sub(r"`quantization([.=])", rf"`stage.{name}.quantization\1", text)
            raise PlacementRefused(text, key=refusal.key) from None
        if policy["param_counts"] is None and not stage.get("evaluate_only"):
            policy["notes"].append(
                f"module checks deferred to load time: the config of `{model['id']}` "
                "could not be read here (offline?)"
            )
        result[name] = StagePlan(
            name=name,
            fingerprint="",  # set below, once every stage's placement is known
            parent=graph.parents[name],
            source=sources[name][0],
            source_identity=sources[name][1],
            model=model,
            data=datas[name],
            frozen=policy["frozen"],
            trained=policy["trained"],
            lora_components=policy["lora_components"],
            lora_targets=policy["lora_targets"],
            quantization=stage.get("quantization"),
            quant_bits=placement.quantization,
            dtype=dtype,
            settings=stage,
            placement=placement,
            notes=policy["notes"],
        )
    # The data-parallel world size sets the effective batch, and a quantization fallback
    # changes the model trained: both are part of what determines the weights.
    weight_settings = {
        name: {
            **stages[name],
            "world_size": result[name].placement.world_size,
            "effective_quantization": result[name].placement.quantization,
            # An evaluation stage's results depend on how it generates.
            **({"eval": cfg["eval"]} if stages[name].get("evaluate_only") else {}),
        }
        for name in graph.order
    }
    fingerprints = dag.fingerprints(
        graph,
        weight_settings,
        source_identity={n: sources[n][1] for n in graph.order},
        data_identity={n: data_identity(datas[n]) for n in graph.order},
        seed=cfg["seed"],
    )
    _check_duplicates(fingerprints)
    for name, fingerprint in fingerprints.items():
        result[name].fingerprint = fingerprint
    hardware = cfg["hardware"]["name"]
    return RecipePlan(cfg["recipe"]["name"], cfg, graph, result, machine, hardware, notes)


def _require(package: str, why: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is None:
        raise RecipeError(
            f"`{why}` needs the {package} package, which is not installed. Install it "
            f"(pip install {package}) or choose parallel=ddp / parallel=fsdp.",
            key="parallel",
        )


def _check_stage_name(name: str, stages: Mapping[str, Any], key: str) -> None:
    if name not in stages:
        from recipe_engine.errors import did_you_mean

        raise RecipeError(
            f"`{key}` names `{name}`, which is not a stage of this recipe."
            f"{did_you_mean(name, stages)} Stages: {', '.join(stages)}.",
            key=key,
        )


def _source(name: str, stage: Mapping[str, Any], cfg: Mapping[str, Any]):
    """(description, identity, model entry, local folder or None) of a stage's starting point."""
    init = stage.get("init") or {}
    model = dict(cfg["model"])
    if init.get("from_stage"):
        return f"stage `{init['from_stage']}` output", None, model, None
    if init.get("path"):
        path = Path(os.path.expanduser(init["path"]))
        if not path.exists():
            raise RecipeError(
                f"`stage.{name}.init.path` is {init['path']}, which does not exist. Point it at "
                "a save_pretrained folder or a trainer checkpoint (checkpoint-N).",
                key=f"stage.{name}.init.path",
            )
        model.update(source="local", id=str(path.resolve()))
        return (
            f"local path {path}",
            {"path": str(path.resolve()), "files": _tree_identity(path)},
            model,
            path,
        )
    if init.get("model"):
        model.update(source="hub", id=init["model"], name=init["model"])
    if model["source"] == "local":
        path = Path(os.path.expanduser(model["id"]))
        if not path.exists():
            raise RecipeError(
                f"`model.id` is {model['id']}, which does not exist. Use an existing "
                "save_pretrained folder, or model.source=hub for a hub id.",
                key="model.id",
            )
        return (
            f"local path {path}",
            {"path": str(path.resolve()), "files": _tree_identity(path)},
            model,
            path,
        )
    identity = {k: model[k] for k in ("source", "id", "revision")}
    return f"{model['source']} model {model['id']}", identity, model, None


def _tree_identity(path: Path) -> list[tuple[str, int, int]]:
    """Names, sizes and mtimes of a folder's files: cheap, and changes when weights change."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [
        (str(p.relative_to(path.parent)), p.stat().st_size, int(p.stat().st_mtime)) for p in files
    ]


def _check_duplicates(fingerprints: Mapping[str, str]) -> None:
    seen: dict[str, str] = {}
    for name, fp in fingerprints.items():
        if fp in seen:
            raise RecipeError(
                f"Stages `{seen[fp]}` and `{name}` are duplicates: same source, data and "
                "settings, so they would train identical weights. Remove one or change its "
                "settings.",
                key=f"stage.{name}",
            )
        seen[fp] = name


def _check_stage_settings(name: str, stage: Mapping[str, Any]) -> None:
    validate.check_dtype(name, stage["dtype"])
    validate_components(stage["freeze"]["components"], f"stage.{name}.freeze.components")
    validate.check_train(name, stage.get("train") or {})
    if stage.get("lora"):
        validate.check_lora_keys(name, stage["lora"])
        validate_components(stage["lora"].get("components") or [], f"stage.{name}.lora.components")
    if stage.get("quantization"):
        validate.check_quant_keys(name, stage["quantization"])
        validate_components(
            stage["quantization"].get("components") or [], f"stage.{name}.quantization.components"
        )


# Code whose behaviour the memoised policy checks depend on.
POLICY_CODE = (
    "planning.py",
    "components.py",
    "policies/freeze.py",
    "policies/lora.py",
    "policies/quant.py",
)


def _evaluation_policy(
    name: str, stage: Mapping[str, Any], graph: dag.StageGraph, stages: Mapping[str, Any]
) -> dict:
    """An evaluation stage trains nothing; it must not quantize, adapt or feed a child."""
    for key in ("lora", "quantization"):
        if stage.get(key):
            raise RecipeError(
                f"`stage.{name}` is an evaluation stage (evaluate_only) but sets `{key}`; "
                f"remove it with ~stage.{name}.{key}.",
                key=f"stage.{name}.{key}",
            )
    children = graph.children(name)
    if children:
        raise RecipeError(
            f"Stage `{children[0]}` starts from `{name}`, an evaluation stage, which has no "
            f"weights. Point `stage.{children[0]}.init.from_stage` at a training stage.",
            key=f"stage.{children[0]}.init.from_stage",
        )
    return {
        "frozen": list(COMPONENTS),
        "trained": [],
        "lora_components": [],
        "lora_targets": [],
        "notes": ["evaluation only: nothing is trained"],
        "param_counts": None,
    }


def _checked_policies(
    name: str,
    stage: Mapping[str, Any],
    model: Mapping[str, Any],
    local: Path | None,
    inventories: dict[str, ModelInventory | None],
) -> dict:
    """A stage's policy split, checked against the model on the meta device.

    Building the meta model costs seconds of imports, so a passing check is remembered in
    the cache folder, keyed by the model's config.json, the policy settings, the library
    versions and this code; any change to them checks again.
    """
    memo = _policy_memo(model, local, stage)
    if memo is not None and memo.is_file():
        return {**json.loads(memo.read_text()), "notes": []}
    key = f"{model['source']}:{model['id']}:{local}"
    if key not in inventories:
        inventories[key] = model_inventory(model, local)
    inventory = inventories[key]
    policy = _policies(name, stage, inventory)
    policy["param_counts"] = inventory.param_counts if inventory is not None else None
    if memo is not None and inventory is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_json(memo, {k: v for k, v in policy.items() if k != "notes"})
    return policy


def _policy_memo(model: Mapping[str, Any], local: Path | None, stage: Mapping) -> Path | None:
    """Where a stage's checked policy is remembered, or None for hub models (no local config)."""
    if local is not None:
        config = Path(local) / "config.json"
    elif model["source"] in ("tiny", "local"):
        from recipe_engine.modeling import model_location

        config = Path(model_location(model)) / "config.json"
    else:
        return None
    if not config.is_file():
        return None
    package = Path(__file__).parent
    key = dag.canonical_hash(
        {
            "config": hashlib.sha256(config.read_bytes()).hexdigest(),
            "kind": model["kind"],
            "policy": {k: stage.get(k) for k in ("freeze", "lora", "quantization")},
            "code": [hashlib.sha256((package / f).read_bytes()).hexdigest() for f in POLICY_CODE],
            "versions": [_version(d) for d in ("transformers", "peft", "bitsandbytes")],
        }
    )
    return validate.cache_dir() / "policies" / f"{key}.json"


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _resolve_dtypes(stage: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """`dtype: auto` means the model entry's dtype, `bnb_4bit_compute_dtype: auto` the stage's.

    Resolved before fingerprinting, so changing the model entry's dtype retrains the stage.
    """
    stage = dict(stage)
    if stage["dtype"] == "auto":
        stage["dtype"] = model["dtype"]
    quant = stage.get("quantization")
    if quant and quant.get("bnb_4bit_compute_dtype") == "auto":
        stage["quantization"] = {**quant, "bnb_4bit_compute_dtype": stage["dtype"]}
    return stage


def _policies(name: str, stage: Mapping[str, Any], inventory: ModelInventory | None) -> dict:
    """Frozen / fully trained / LoRA components of a stage, checked against the model.

    Without the model's config (a hub model offline) the split is derived from the recipe
    alone and the module-level checks wait for load time.
    """
    frozen = list(stage["freeze"]["components"])
    patterns = list(stage["freeze"].get("patterns") or [])
    lora = stage.get("lora")
    quant = stage.get("quantization")
    if inventory is None:
        lora_components = list((lora or {}).get("components") or [])
        trained = [c for c in COMPONENTS if c not in frozen and c not in lora_components]
        return _policy(frozen, trained, lora_components, [])
    present = [c for c in COMPONENTS if inventory.param_counts.get(c)]
    if lora:
        from recipe_engine.policies.lora import plan_lora

        planned = plan_lora(
            inventory.meta_model,
            architecture=inventory.architecture,
            lora=lora,
            frozen=frozen,
            patterns=patterns,
        )
        lora_components, trained, targets = (
            planned.components,
            planned.fully_trained,
            planned.targets,
        )
    else:
        lora_components, targets = [], []
        trained = [c for c in present if c not in frozen]
    if not targets and not trained:
        raise RecipeError(
            f"Stage `{name}` trains nothing: `stage.{name}.freeze.components` freezes "
            f"{', '.join(frozen) or 'nothing'} and there is no LoRA, leaving no trainable "
            f"parameters. Unfreeze a component or add stage.{name}.lora.",
            key=f"stage.{name}.freeze.components",
        )
    if quant:
        from recipe_engine.policies.quant import bnb_config

        names = [n for n, _ in inventory.meta_model.named_modules()]
        bnb_config(quant, architecture=inventory.architecture, module_names=names, trained=trained)
    return _policy(frozen, trained, lora_components, targets)


def _policy(
    frozen: list[str], trained: list[str], lora_components: list[str], targets: list[str]
) -> dict:
    return {
        "frozen": frozen,
        "trained": trained,
        "lora_components": lora_components,
        "lora_targets": targets,
        "notes": [],
    }


def _footprint_gib(policy: Mapping, model: Mapping[str, Any], dtype: str, bits: str) -> float:
    """Rough training footprint: weights at their storage width + optimizer state."""
    if policy["param_counts"] is None:
        billions = model.get("params_billion") or 0.0
        width = BYTES_PER_PARAM[bits if bits != "none" else dtype]
        return billions * 1e9 * width * 1.2 / 2**30
    total = 0.0
    for component, count in policy["param_counts"].items():
        width = BYTES_PER_PARAM[dtype]
        if bits != "none" and component == "language_model":
            width = BYTES_PER_PARAM[bits]
        total += count * width
        if component in policy["trained"]:
            total += count * TRAINABLE_BYTES
    return total * 1.2 / 2**30  # activations and allocator slack


def _placement_request(
    cfg: Mapping[str, Any], machine: Machine, stage: Mapping[str, Any], bits: str, gib: float
) -> PlacementRequest:
    hardware = cfg["hardware"]
    quant = stage.get("quantization") or {}
    from_profile = not hardware.get("detect", True)
    return PlacementRequest(
        device=cfg["device"],
        gpus=parse_gpus(cfg.get("gpus")),
        parallel=cfg["parallel"],
        nproc=cfg.get("nproc"),
        machine_gpus=profile_gpus(hardware) if from_profile else machine.gpus,
        from_profile=from_profile,
        cuda_visible_devices=None if from_profile else machine.cuda_visible_devices,
        mps_available=bool(hardware.get("mps")) if from_profile else machine.mps_available,
        world_size=machine.world_size,
        local_rank=machine.local_rank,
        launched_by=machine.launched_by,
        quantization=bits,
        quant_storage_set=bool(quant.get("bnb_4bit_quant_storage")),
        on_unsupported=quant.get("on_unsupported", "error"),
        model_gib=gib,
    )


def model_inventory(model: Mapping[str, Any], local: Path | None) -> ModelInventory | None:
    """Build the model on the meta device from its config; None when the config is unreachable."""
    from recipe_engine.modeling import load_config, meta_model

    config = load_config(model, local)
    if config is None:
        return None
    from recipe_engine.components import architecture_of, component_of

    architecture = architecture_of(config.model_type)
    meta = meta_model(config, model["kind"])
    counts: dict[str, int] = {}
    for pname, param in meta.named_parameters():
        component = component_of(pname, architecture)
        counts[component] = counts.get(component, 0) + param.numel()
    return ModelInventory(config.model_type, architecture, counts, meta_model=meta)


def render_plan(plan: RecipePlan) -> str:
    """The `plan` verb's output: per stage in order, source, policies and placement."""
    lines = [f"recipe {plan.recipe}  ({len(plan.stages)} stage(s), hardware: {plan.hardware})"]
    for index, name in enumerate(plan.graph.order, 1):
        stage = plan.stages[name]
        parent = f"  parent: {stage.parent}" if stage.parent else ""
        lines += [
            "",
            f"[{index}] stage {name}  key {dag.short(stage.fingerprint)}{parent}",
            f"    init:      {stage.source}",
            f"    frozen:    {', '.join(stage.frozen) or '-'}",
            f"    trained:   {', '.join(stage.trained) or '-'} (full)",
            f"    lora:      {_lora_text(stage)}",
            f"    quantized: {_quant_text(stage)}",
            f"    dtype:     {stage.dtype}",
        ]
        lines += [f"    {line}" for line in describe(stage.placement)]
        lines += [f"    note: {note}" for note in stage.notes]
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)


def _lora_text(stage: StagePlan) -> str:
    if not stage.settings.get("lora"):
        return "-"
    lora = stage.settings["lora"]
    count = f", {len(stage.lora_targets)} modules" if stage.lora_targets else ""
    return f"{', '.join(stage.lora_components)} (r={lora.get('r', 8)}{count})"


def _quant_text(stage: StagePlan) -> str:
    if stage.quant_bits == "none":
        fallback = stage.placement.quantization_fallback
        return f"- (requested quantization skipped: {fallback})" if fallback else "-"
    quant = stage.quantization or {}
    kind = quant.get("bnb_4bit_quant_type", "nf4") if stage.quant_bits == "4bit" else "int8"
    return (
        f"{stage.quant_bits} {kind} on {', '.join(quant.get('components') or ['language_model'])}"
    )
