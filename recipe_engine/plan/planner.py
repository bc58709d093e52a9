"""Recipe -> `RecipePlan`: every stage checked, resolved, placed and keyed before weights load.

`plan_recipe` reads as the list of decisions, stage by stage, in graph order: settings ->
init source -> policy -> placement -> data -> trainer settings, then the keys of all stages.
Checks that need module names use the model built on the meta device from its config.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from recipe_engine.config import library_keys
from recipe_engine.config.bounds import check_engine_values
from recipe_engine.config.components import validate_components
from recipe_engine.config.compose import to_engine_config
from recipe_engine.config.schema import (
    DataConfig,
    EngineConfig,
    ModelConfig,
    StageConfig,
    without_empty_sections,
)
from recipe_engine.errors import RecipeError, did_you_mean, unknown_key
from recipe_engine.plan import dag, data, data_rows, gguf, memo, memory_inputs, model_files
from recipe_engine.plan.data import data_identity
from recipe_engine.plan.determinism import Determinism, decide_determinism
from recipe_engine.plan.hardware import Machine, detect_machine, parse_gpus, profile_gpus
from recipe_engine.plan.hub_revisions import HubRevisions
from recipe_engine.plan.library_check import check_with_libraries
from recipe_engine.plan.models import check_model_entry, model_location
from recipe_engine.plan.placement import (
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    plan_placement,
)
from recipe_engine.plan.policy import evaluation_policy, plan_policy
from recipe_engine.plan.recipe_plan import (
    HUB,
    LOCAL,
    PARENT,
    DataPlan,
    InitSource,
    PolicyPlan,
    RecipePlan,
    StagePlan,
)
from recipe_engine.plan.trainer_settings import (
    choose_loss,
    has_chat_template,
    template_support,
    trainer_settings,
    zero_stage,
)

# Components only image tokens reach.
VISION_SIDE = {"vision_tower", "projector"}
# Training memory per trainable parameter: fp32 gradient + two AdamW moments.
TRAINABLE_BYTES = 12
BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "float16": 2, "4bit": 0.5, "8bit": 1}


def plan_from_config(cfg: DictConfig | EngineConfig, machine: Machine | None = None) -> RecipePlan:
    config = cfg if isinstance(cfg, EngineConfig) else to_engine_config(cfg)
    return plan_recipe(config, machine or detect_machine())


def plan_recipe(cfg: EngineConfig, machine: Machine) -> RecipePlan:
    check_engine_values(cfg.seed, dataclasses.asdict(cfg.eval))
    check_model_entry(cfg.model)
    stages = {name: resolve_dtypes(stage, cfg.model) for name, stage in cfg.stage.items()}
    graph = dag.build_graph(
        {n: dataclasses.asdict(s) for n, s in stages.items()}, cfg.recipe.targets
    )
    for key, names in (("only", cfg.only), ("force", cfg.force)):
        for name in names:
            _check_stage_name(name, stages, key)
    planned: dict[str, StagePlan] = {}
    datas: dict[tuple[str, str], DataPlan] = {}
    revisions = HubRevisions.of_store(cfg.output_root)  # read only: `run` pins
    for name in graph.order:
        parent = planned[graph.parents[name]] if graph.parents[name] else None
        planned[name] = _plan_stage(
            cfg, machine, name, stages[name], parent, graph, datas, revisions
        )
    _set_fingerprints(cfg, graph, planned)
    check_with_libraries(list(planned.values()))
    return RecipePlan(cfg.recipe.name, cfg, graph, planned, machine, cfg.hardware.name)


def _plan_stage(
    cfg: EngineConfig,
    machine: Machine,
    name: str,
    stage: StageConfig,
    parent: StagePlan | None,
    graph: dag.StageGraph,
    datas: dict[tuple[str, str], DataPlan],
    revisions: HubRevisions,
) -> StagePlan:
    _check_stage_settings(name, stage)
    init, model = resolve_init(name, stage, cfg.model, parent, revisions)
    if stage.evaluate_only:
        policy = evaluation_policy(name, stage, graph.children(name))
    else:
        policy = plan_policy(name, stage, model, readable=_readable(init, model, parent))
    rows = plan_data(stage_data(name, cfg.data, stage.data), model.kind, cfg.seed, datas)
    rows = _through_chat_template(rows, init, model, datas)
    placement = _place(name, cfg, machine, stage, policy, model, rows)
    if placement.quantization == "none":  # skipped where bitsandbytes cannot run (recorded)
        policy = dataclasses.replace(policy, quantization=None)
    stage, loss_notes = _loss_follows_data(name, stage, rows, init, model)
    _check_trainable_rows(name, stage, rows, cfg.eval.enabled)
    _check_rows_reach_training(name, policy, rows)
    determinism = _determinism(cfg, stage, placement)
    trainer = trainer_settings(stage, placement, cfg.seed, model.kind, rows.eval_rows > 0)
    return StagePlan(
        name=name,
        fingerprint="",  # set once every stage's placement is known
        parent=parent.name if parent else None,
        config=stage,
        init=init,
        model=model,
        data=rows,
        policy=policy,
        dtype=stage.dtype,
        placement=placement,
        trainer={**trainer, "full_determinism": determinism.deterministic_kernels},
        determinism=determinism,
        notes=[*_notes(policy, model, stage, init), *loss_notes],
        memory=_memory(name, cfg, machine, stage, policy, model, rows, placement),
    )


def _determinism(cfg: EngineConfig, stage: StageConfig, placement: PlacementPlan) -> Determinism:
    """`deterministic=true`, or the stage's own `train.full_determinism`, asks for
    deterministic kernels; what that buys depends on the device."""
    asked = cfg.deterministic or bool(stage.train.get("full_determinism"))
    quantized = placement.quantization != "none"
    return decide_determinism(placement.device, deterministic=asked, quantized=quantized)


def _check_rows_reach_training(name: str, policy: PolicyPlan, rows: DataPlan) -> None:
    """Text-only rows never pass through the vision tower or projector: a stage training
    only those would fail at its first backward pass (no gradient reaches them)."""
    trained = set(policy.trained_components)
    if data_rows.has_images(rows.format) or not trained or not trained <= VISION_SIDE:
        return
    raise RecipeError(
        f"Stage `{name}` trains only {', '.join(sorted(trained))}, but its data "
        f"({rows.describe()}) has no images, so nothing it trains would get a gradient. "
        "Give it image rows (data.format=vlm, an images column), or train the language model "
        f"too (stage.{name}.freeze.components, stage.{name}.lora).",
        key=f"stage.{name}.data",
    )


# --------------------------------------------------------------------------- settings


def resolve_dtypes(stage: StageConfig, model: ModelConfig) -> StageConfig:
    """`dtype: auto` means the model entry's dtype, `bnb_4bit_compute_dtype: auto` the stage's.

    Resolved before fingerprinting, so changing the model entry's dtype retrains the stage.
    """
    dtype = model.dtype if stage.dtype == "auto" else stage.dtype
    sections = without_empty_sections(dataclasses.asdict(stage))  # empty: not used, same key
    quant = sections["quantization"]
    if quant and quant.get("bnb_4bit_compute_dtype") == "auto":
        quant = {**quant, "bnb_4bit_compute_dtype": dtype}
    return dataclasses.replace(
        stage, dtype=dtype, lora=sections["lora"], quantization=quant, data=sections["data"]
    )


def _check_stage_settings(name: str, stage: StageConfig) -> None:
    library_keys.check_dtype(name, stage.dtype)
    validate_components(stage.freeze.components, f"stage.{name}.freeze.components")
    library_keys.check_train(name, stage.train)
    if stage.lora:
        library_keys.check_lora_keys(name, stage.lora)
        validate_components(stage.lora.get("components") or [], f"stage.{name}.lora.components")
    if stage.quantization:
        library_keys.check_quant_keys(name, stage.quantization)
        validate_components(
            stage.quantization.get("components") or [], f"stage.{name}.quantization.components"
        )


def _check_stage_name(name: str, stages: Mapping[str, Any], key: str) -> None:
    if name not in stages:
        raise RecipeError(
            f"`{key}` names `{name}`, which is not a stage of this recipe."
            f"{did_you_mean(name, stages)} Stages: {', '.join(stages)}.",
            key=key,
        )


# --------------------------------------------------------------------------- init source


def resolve_init(
    name: str,
    stage: StageConfig,
    recipe_model: ModelConfig,
    parent: StagePlan | None,
    revisions: HubRevisions | None = None,
) -> tuple[InitSource, ModelConfig]:
    """Where a stage's weights come from, and the model entry they descend from (a hub
    model's at the commit `revisions` resolves its revision to)."""
    if parent is not None:
        description = f"stage `{parent.name}` output"
        return InitSource(PARENT, description, parent=parent.name), parent.model
    init = stage.init
    if init.path:  # a save_pretrained folder: the entry's GGUF file is not in it
        path = Path(os.path.expanduser(init.path)).resolve()
        model = dataclasses.replace(recipe_model, source=LOCAL, id=str(path), gguf_file=None)
        return _local_source(init.path, f"stage.{name}.init.path", model), model
    model = recipe_model
    key = "model.id"
    if init.model:
        model = dataclasses.replace(
            recipe_model, source=HUB, id=init.model, name=init.model, gguf_file=None
        )
        key = f"stage.{name}.init.model"
    if model.gguf_file:
        return _gguf_source(model, key), model
    if model.source == LOCAL:
        return _local_source(model.id, key, model), model
    if model.source == HUB:
        return _hub_source(model, key, revisions or HubRevisions())
    identity = {"source": model.source, "id": model.id, "revision": model.revision}
    location = model_location(dataclasses.asdict(model))
    description = f"{model.source} model {model.id}"
    return InitSource(model.source, description, location, model.revision, identity=identity), model


def _hub_source(
    model: ModelConfig, key: str, revisions: HubRevisions
) -> tuple[InitSource, ModelConfig]:
    """A hub id at the commit its revision resolves to (given, pinned or resolved now). The
    commit replaces the entry's revision, so it enters the key, the checks, `run`'s
    from_pretrained and the manifest alike; unresolved (neither cached nor reachable), the
    entry stays as written and `run` refuses it here."""
    revision = revisions.resolve(model.id, model.revision)
    if revision is not None:
        model = dataclasses.replace(model, revision=revision.commit)
    unavailable = _check_hub_files(model, key)
    identity = {"source": HUB, "id": model.id, "revision": model.revision}
    at = f" at {revision.commit[:12]}" if revision else ""
    init = InitSource(
        HUB,
        f"hub model {model.id}{at}",
        model.id,
        model.revision,
        identity=identity,
        unavailable=unavailable,
        hub_revision=revision,
    )
    return init, model


def _local_source(given: str, key: str, model: ModelConfig) -> InitSource:
    path = Path(os.path.expanduser(given))
    if not path.exists():
        fix = (
            "Point it at a save_pretrained folder or a trainer checkpoint (checkpoint-N)."
            if key != "model.id"
            else "Use an existing save_pretrained folder, or model.source=hub for a hub id."
        )
        raise RecipeError(f"`{key}` is {given}, which does not exist. {fix}", key=key)
    resolved = path.resolve()
    identity = {"path": str(resolved), "files": _tree_identity(path)}
    _check_model_files(resolved, key, model, identity)
    return InitSource(
        LOCAL,
        f"local path {path}",
        str(resolved),
        adapter=(resolved / "adapter_config.json").is_file(),
        identity=identity,
    )


def _gguf_source(model: ModelConfig, key: str) -> InitSource:
    """A GGUF file (in local folder or hub repository `model.id`), converted once into the
    cache: the converted folder is checked and loaded like any folder; the key hashes the
    GGUF file itself (its name, size and SHA-256), so a rebuilt cache keeps every key."""
    converted = gguf.gguf_model(dataclasses.asdict(model))
    where = f"{model.source} GGUF {model.gguf_file} from {model.id}"
    if converted.folder is None:  # a hub file that cannot be had here: `run` refuses
        return InitSource(
            model.source,
            where,
            model.id,
            model.revision,
            identity=converted.identity,
            unavailable=converted.unavailable,
        )
    folder = converted.folder
    _check_model_files(folder, key, model, {"path": str(folder), "files": _tree_identity(folder)})
    return InitSource(
        model.source,
        f"{where} (converted once: {folder.name} in the engine cache)",
        str(folder),
        model.revision,
        identity=converted.identity,
    )


def _check_model_files(folder: Path, key: str, model: ModelConfig, identity: Any) -> None:
    """The folder loads as this stage's kind of model: config, weights' headers, code
    (remembered per folder contents, as the headers do not change without the files)."""
    flags = {"kind": model.kind, "trust": model.trust_remote_code, "pickle": model.allow_pickle}

    def check() -> dict[str, Any]:
        model_files.check_model_folder(
            folder,
            kind=model.kind,
            key=key,
            trust_remote_code=model.trust_remote_code,
            allow_pickle=model.allow_pickle,
        )
        return {"loadable": True}

    memo.remembered("models", {"files": identity, "key": key, **flags}, check)


def _check_hub_files(model: ModelConfig, key: str) -> str | None:
    """A hub id the hub has (or the cache, offline), whose cached files load; else why it
    cannot be had from here."""
    hub = model_files.check_hub_model(model.id, model.revision, key=key)
    cached = hub.cached
    if cached is not None:
        _check_model_files(
            cached, key, model, {"path": str(cached), "files": _tree_identity(cached)}
        )
    return hub.unavailable


def _tree_identity(path: Path) -> list[tuple[str, int, int]]:
    """Names, sizes and mtimes of a folder's files: cheap, and changes when weights change."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [
        (str(p.relative_to(path.parent)), p.stat().st_size, int(p.stat().st_mtime)) for p in files
    ]


# --------------------------------------------------------------------------- placement


def _place(
    name: str,
    cfg: EngineConfig,
    machine: Machine,
    stage: StageConfig,
    policy: PolicyPlan,
    model: ModelConfig,
    rows: DataPlan,
) -> PlacementPlan:
    request = placement_request(cfg, machine, stage, _footprint_gib(policy, model, stage))
    # The estimated peak on one device decides fit / refuse (the rough footprint only
    # where no config is at hand to estimate from).
    single = _memory(name, cfg, machine, stage, policy, model, rows, None)
    if single is not None:
        request = dataclasses.replace(
            request, model_gib=single.estimate.peak, memory_advice=tuple(single.advice())
        )
    if request.parallel == "deepspeed":  # ZeRO-3 shards weights: placement checks differ
        _require("deepspeed", "parallel=deepspeed")
        request = dataclasses.replace(request, deepspeed_stage=zero_stage(name, stage.train))
    try:
        return plan_placement(request)
    except PlacementRefused as refusal:  # name the stage's own quantization keys
        text = str(refusal).replace("`quantization=none`", f"`stage.{name}.quantization=null`")
        text = re.sub(r"`quantization([.=])", rf"`stage.{name}.quantization\1", text)
        raise PlacementRefused(text, key=refusal.key) from None


def placement_request(
    cfg: EngineConfig, machine: Machine, stage: StageConfig, gib: float
) -> PlacementRequest:
    hardware = cfg.hardware
    quant = stage.quantization or {}
    from_profile = not hardware.detect
    return PlacementRequest(
        device=cfg.device,
        gpus=parse_gpus(cfg.gpus),
        parallel=cfg.parallel,
        nproc=cfg.nproc,
        machine_gpus=profile_gpus(dataclasses.asdict(hardware)) if from_profile else machine.gpus,
        from_profile=from_profile,
        cuda_visible_devices=None if from_profile else machine.cuda_visible_devices,
        mps_available=hardware.mps if from_profile else machine.mps_available,
        world_size=machine.world_size,
        local_rank=machine.local_rank,
        launched_by=machine.launched_by,
        quantization=library_keys.quant_bits(quant),
        quant_storage_set=bool(quant.get("bnb_4bit_quant_storage")),
        on_unsupported=quant.get("on_unsupported", "error"),
        model_gib=gib,
    )


def _footprint_gib(policy: PolicyPlan, model: ModelConfig, stage: StageConfig) -> float:
    """Rough training footprint: weights at their storage width + optimizer state."""
    bits = library_keys.quant_bits(stage.quantization)
    if policy.param_counts is None:
        width = BYTES_PER_PARAM[bits if bits != "none" else stage.dtype]
        return (model.params_billion or 0.0) * 1e9 * width * 1.2 / 2**30
    total = 0.0
    for component, count in policy.param_counts.items():
        width = BYTES_PER_PARAM[stage.dtype]
        if bits != "none" and component == "language_model":
            width = BYTES_PER_PARAM[bits]
        total += count * width
        if component in policy.trained:
            total += count * TRAINABLE_BYTES
    return total * 1.2 / 2**30  # activations and allocator slack


def _memory(
    name: str,
    cfg: EngineConfig,
    machine: Machine,
    stage: StageConfig,
    policy: PolicyPlan,
    model: ModelConfig,
    rows: DataPlan,
    placement: PlacementPlan | None,
) -> memory_inputs.StageMemory | None:
    """The stage's estimated peak per device (`placement` None: on one GPU, before placing)."""
    if stage.evaluate_only:
        return None
    if policy.deferred:  # a hub model's config is not readable here: its shipped snapshot
        policy = memory_inputs.snapshot_policy(name, stage, model) or policy
    hardware = cfg.hardware
    gpus = profile_gpus(dataclasses.asdict(hardware)) if not hardware.detect else machine.gpus
    on_gpu = placement is None or placement.device == "cuda"
    capacity = min((g.memory_gib for g in gpus), default=0.0) if on_gpu else 0.0
    deepspeed = placement is not None and placement.mode == "deepspeed"
    return memory_inputs.stage_memory(
        stage,
        model,
        policy,
        rows,
        placement,
        capacity or None,
        zero_stage(name, stage.train) if deepspeed else None,
    )


def _readable(init: InitSource, model: ModelConfig, parent: StagePlan | None) -> bool:
    """Whether the model's config can be read here. A child of a stage whose hub config could
    not be read cannot read it either: asking again would import transformers for nothing."""
    unreadable_parent = parent is not None and parent.policy.deferred and parent.model == model
    return init.unavailable is None and not unreadable_parent


def _require(package: str, why: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise RecipeError(
            f"`{why}` needs the {package} package, which is not installed. Install it "
            f"(pip install {package}) or choose parallel=ddp / parallel=fsdp.",
            key="parallel",
        )


# --------------------------------------------------------------------------- data


def stage_data(name: str, recipe_data: DataConfig, keys: Mapping[str, Any] | None) -> DataConfig:
    """The recipe's data with the stage's own `data` keys in place of the recipe's."""
    fields = {f.name for f in dataclasses.fields(DataConfig)}
    for key in keys or {}:
        if key not in fields:
            raise unknown_key(f"stage.{name}.data.{key}", fields, "a stage's data (data keys)")
    return dataclasses.replace(recipe_data, **(keys or {}))


def plan_data(
    config: DataConfig, kind: str, seed: int, planned: dict[tuple[str, str], DataPlan]
) -> DataPlan:
    """A stage's rows, checked row by row (once per exact data) and described.

    Stages reading the same rows share one `DataPlan`, so a run reads them once.
    """
    identity = data_identity(config)
    if (identity, kind) in planned:
        return planned[identity, kind]
    read: list[data.DataSplits] = []

    def check() -> dict[str, Any]:
        read.append(data.load_splits(config, kind=kind, seed=seed))
        splits = read[0]
        held_out = len(splits.eval) if splits.eval is not None else 0
        return {"format": splits.format, "train_rows": len(splits.train), "eval_rows": held_out}

    inputs = {"identity": identity, "kind": kind, "seed": seed}
    # Hub data may change upstream under the same name: checked every time.
    checked = check() if config.source == "hub" else memo.remembered("rows", inputs, check)
    plan = DataPlan(config, kind, seed, identity, **checked, _splits=read[0] if read else None)
    planned[identity, kind] = plan
    return plan


def _loss_follows_data(
    name: str, stage: StageConfig, rows: DataPlan, init: InitSource, model: ModelConfig
) -> tuple[StageConfig, list[str]]:
    """The stage with the loss flag its rows call for (`choose_loss`) among its `train`
    keys, so that the flag enters the stage key, and the note `plan` prints about it."""
    if stage.evaluate_only:
        return stage, []
    template = "" if data_rows.is_prompt_completion(rows.format) else _template(init, model)
    choice = choose_loss(name, stage.train, rows.format, template)
    train = {**stage.train, **choice.flags}
    return dataclasses.replace(stage, train=train), [choice.note]


def _template(init: InitSource, model: ModelConfig) -> str:
    """What the chat template of the weights' tokenizer allows."""
    return template_support(_tokenizer_location(init, model), model.revision)


def _tokenizer_location(init: InitSource, model: ModelConfig) -> str | None:
    """Where the weights' tokenizer is saved (a stage's output keeps its base's processor, so a
    child reads the model entry's)."""
    if init.kind != PARENT:
        return init.location
    try:
        return model_location(dataclasses.asdict(model))
    except RecipeError:  # a GGUF file that cannot be had here: `run` refuses it
        return None


def _through_chat_template(
    rows: DataPlan, init: InitSource, model: ModelConfig, datas: dict[tuple[str, str], DataPlan]
) -> DataPlan:
    """Plain prompt/completion rows as TRL's conversational prompt-completion where the model
    has a chat template (`data.chat_template`), so that training, evaluation and `compare` ask
    an instruct model as it was made to be asked; the data line of `plan` says which, and why.
    Conversations go through the template anyway; image rows are conversational already."""
    setting = data.chat_template_setting(rows.config)
    if rows.format not in (data_rows.PROMPT_COMPLETION, data_rows.CHAT_PROMPT_COMPLETION):
        if setting == "true":  # moot for these rows: the key `auto` gives them
            auto = dataclasses.replace(rows.config, chat_template="auto")
            return plan_data(auto, rows.kind, rows.seed, datas)
        return rows
    if setting == "false":
        return _rendered(rows, "as plain text (data.chat_template=false)", datas)
    found = has_chat_template(_tokenizer_location(init, model), model.revision)
    if setting == "true" and found is False:
        raise RecipeError(
            f"data.chat_template=true, but the tokenizer of `{model.name}` has no chat "
            "template to put the prompt/completion rows through. Use data.chat_template=auto "
            "(plain text for such a model) or a model with a chat template.",
            key="data.chat_template",
        )
    if setting == "auto" and not found:
        why = "has no chat template" if found is False else "chat template cannot be read here"
        # Recorded as decided (the key stays: `false` is not hashed), so that `compare` asks
        # probes as these rows were asked.
        plain = dataclasses.replace(rows.config, chat_template="false")
        rows = dataclasses.replace(rows, config=plain)
        return _rendered(rows, f"as plain text: the model's tokenizer {why}", datas)
    if setting == "auto":  # the same rows, read as conversations: another data identity
        chat = dataclasses.replace(rows.config, chat_template="true")
        rows = plan_data(chat, rows.kind, rows.seed, datas)
    return _rendered(rows, "through the chat template", datas)


def _rendered(rows: DataPlan, rendering: str, datas: dict[tuple[str, str], DataPlan]) -> DataPlan:
    """`rows` with how they reach the model, shared by the stages that read them so (a run
    reads them once)."""
    key = (rows.identity, f"{rows.kind}: {rendering}")
    return datas.setdefault(key, dataclasses.replace(rows, rendering=rendering))


def _check_trainable_rows(name: str, stage: StageConfig, data: DataPlan, evaluation: bool) -> None:
    """What the trainer and the evaluation will do with these rows must be possible."""
    if stage.evaluate_only and not data.eval_rows:
        raise RecipeError(
            f"Evaluation stage `{name}` needs a held-out split: set data.eval_split "
            "to a split your data has, or data.eval_fraction=0.1.",
            key="data.eval_split",
        )
    if evaluation and not stage.evaluate_only and not data.eval_rows:
        raise RecipeError(
            f"Stage `{name}` is evaluated after training (eval.enabled), but its data "
            f"({data.origin}) has no held-out rows. Hold some out with "
            "data.eval_fraction=0.1, point data.eval_split at a split your data has, or "
            "train without evaluation: eval.enabled=false.",
            key="data.eval_split",
        )


# --------------------------------------------------------------------------- keys and notes


def _set_fingerprints(
    cfg: EngineConfig, graph: dag.StageGraph, planned: dict[str, StagePlan]
) -> None:
    """Each stage's key; the data-parallel world size and a quantization fallback change the
    weights, and an evaluation stage's results depend on how it generates: all are hashed."""
    settings = {}
    for name, stage in planned.items():
        settings[name] = {
            **dataclasses.asdict(stage.config),
            "world_size": stage.placement.world_size,
            "effective_quantization": stage.placement.quantization,
            **({"eval": dataclasses.asdict(cfg.eval)} if stage.evaluate_only else {}),
            **_declared_layout(stage.model),
            **_randomness(stage),
        }
    fingerprints = dag.fingerprints(
        graph,
        settings,
        source_identity={n: s.init.identity for n, s in planned.items()},
        data_identity={n: s.data.identity for n, s in planned.items()},
        seed=cfg.seed,
    )
    _check_duplicates(fingerprints)
    for name, fingerprint in fingerprints.items():
        planned[name].fingerprint = fingerprint


def _randomness(stage: StagePlan) -> dict[str, Any]:
    """How a stage's random draws are made, where that changed what its key trains to.

    LoRA adapters were initialised from an unseeded generator until the engine seeded them
    (right before the policies): such a key named no single result, so LoRA stages (and their
    children) got new keys. Deterministic CUDA kernels compute other weights than the fast
    ones, so asking for them is part of the key (default keys stay as they were).
    """
    seeded = {"lora_init": "seeded"} if stage.config.lora else {}
    kernels = {"deterministic_kernels": True} if stage.determinism.deterministic_kernels else {}
    return {**seeded, **kernels}


def _declared_layout(model: ModelConfig) -> dict[str, Any]:
    """A layout the model entry names or declares decides what `freeze.components` and the
    other component lists select, so it is hashed; the built-in default is not (keys stay)."""
    if model.layout is None and not model.components:
        return {}
    return {"layout": {"name": model.layout, "components": dict(model.components)}}


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


def _notes(
    policy: PolicyPlan, model: ModelConfig, stage: StageConfig, init: InitSource
) -> list[str]:
    if stage.evaluate_only:
        return ["evaluation only: nothing is trained"]
    if init.unavailable:
        return [
            f"`{model.id}` cannot be had from here (not cached; offline or no answer from the "
            "hub): module checks wait for load time, and `run` refuses the stage here"
        ]
    if policy.deferred:
        return [
            f"module checks deferred to load time: the config of `{model.id}` "
            "could not be read here"
        ]
    return []
