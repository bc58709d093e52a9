"""A stage being planned: the context it is planned in and what the pipeline (`plan.pipeline`)
has decided of it, as its kind and capabilities see it (`stage_facts`) and as `plan` notes it;
where it is placed (its placement request, rough footprint and estimated peak) and its dtypes
as placed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.capabilities import (
    FrozenModel,
    InputStage,
    StageFacts,
    Vocabulary,
)
from recipe_engine.config import library_keys
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import EngineConfig, ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.hardware import parse_gpus, profile_gpus
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.memory_inputs import MemoryInputs, stage_memory
from recipe_engine.plan.packing import attention_implementation
from recipe_engine.plan.placement import (
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    plan_placement,
)
from recipe_engine.plan.policy import decide_policy
from recipe_engine.plan.precision import PrecisionPlan, decide_precision, k_bit_storage
from recipe_engine.plan.recipe_plan import PolicyPlan, StagePlan
from recipe_engine.plan.trainer_settings import (
    ZeroSettings,
    deepspeed_settings,
    zero_settings,
    zero_stage,
)
from recipe_engine.plugins import used_by
from recipe_engine.resolve.formats import has_images
from recipe_engine.resolve.inputs import ModelFiles, Rows, StageInputs
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.sources import InitSource

# Training memory per trainable parameter: fp32 gradient + two AdamW moments.
TRAINABLE_BYTES = 12
BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "float16": 2, "4bit": 0.5, "8bit": 1}


@dataclass(frozen=True)
class StageContext:
    """One stage being planned: the recipe, the machine, the stage's settings and inputs,
    and the other stages its capabilities load, planned before it (by role)."""

    cfg: EngineConfig
    machine: Machine
    name: str
    stage: StageConfig  # dtypes resolved
    inputs: StageInputs
    loaded: dict[str, StagePlan] = field(default_factory=dict)  # a teacher, by role
    loaded_files: dict[str, ModelFiles | None] = field(default_factory=dict)  # their models'

    @property
    def init(self) -> InitSource:
        return self.inputs.model.init

    @property
    def model(self) -> ModelConfig:
        return self.inputs.model.entry

    @property
    def model_type(self) -> str | None:
        """Its model config's `model_type` (None: no config read)."""
        return (_model_config(self) or {}).get("model_type")

    @property
    def attention(self) -> str:
        """The attention implementation its model config names (`plan.packing`)."""
        return attention_implementation(_model_config(self))


@dataclass(frozen=True)
class Decided:
    """What the pipeline has decided of a stage that its placement and memory estimate read."""

    policy: PolicyPlan
    rows: Rows
    frozen: tuple[FrozenModel, ...] = ()  # the models its capabilities hold beside it
    # Its trainer's settings once settled ({} before): a DeepSpeed config, the autocast flags.
    trainer: LibraryKwargs = field(default_factory=dict)


def place_stage(context: StageContext, decided: Decided) -> PlacementPlan:
    """Devices, processes and `n_gpu`, from the stage's estimated peak on one device."""
    policy = decided.policy
    name, stage = context.name, context.stage
    request = placement_request(context.cfg, context.machine, stage, footprint_gib(context, policy))
    # The estimated peak on one device decides fit / refuse (the rough footprint only
    # where no config is at hand to estimate from).
    single = stage_estimate(context, decided)
    if single is not None:
        request = dataclasses.replace(
            request, model_gib=single.estimate.peak, memory_advice=tuple(single.advice())
        )
    if request.parallel == "deepspeed":  # ZeRO-3 shards weights: placement checks differ
        request = dataclasses.replace(
            request, deepspeed_stage=zero_stage(deepspeed_settings(context.inputs.deepspeed))
        )
    try:
        return plan_placement(request)
    except PlacementRefused as refusal:  # name the stage's own quantization keys
        text = str(refusal).replace("`quantization=none`", f"`stage.{name}.quantization=null`")
        text = text.replace("stage.<name>.", f"stage.{name}.")
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
        nodes=cfg.nodes,
        scheduled=launcher_kind(cfg.launcher).scheduled,
        node_starter=launcher_kind(cfg.launcher).node_starter,
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


def footprint_gib(context: StageContext, policy: PolicyPlan) -> float:
    """Rough training footprint: weights at their storage width + optimizer state."""
    stage = context.stage
    bits = library_keys.quant_bits(stage.quantization)
    if policy.param_counts is None:
        width = BYTES_PER_PARAM[bits if bits != "none" else stage.dtype]
        return (context.model.params_billion or 0.0) * 1e9 * width * 1.2 / 2**30
    total = 0.0
    for component, count in policy.param_counts.items():
        width = BYTES_PER_PARAM[stage.dtype]
        if bits != "none" and component == "language_model":
            width = BYTES_PER_PARAM[bits]
        total += count * width
        if component in policy.trained:
            total += count * TRAINABLE_BYTES
    return total * 1.2 / 2**30  # activations and allocator slack


def _zero(trainer: LibraryKwargs) -> ZeroSettings | None:
    """What the estimate reads of the DeepSpeed config the stage trains with (none without
    DeepSpeed), at the precision the trainer's settings give it."""
    config = trainer.get("deepspeed")
    half_precision = bool(trainer.get("bf16") or trainer.get("fp16"))
    return zero_settings(config, half_precision) if config else None


def stage_estimate(
    context: StageContext, decided: Decided, placement: PlacementPlan | None = None
) -> StageMemory | None:
    """The stage's estimated peak per device (`placement` None: on one GPU, before placing;
    a DeepSpeed stage's ZeRO settings from its trainer's, once settled)."""
    policy, rows, frozen = decided.policy, decided.rows, decided.frozen
    stage = context.stage
    if stage.evaluate_only:
        return None
    if policy.deferred:  # a hub model's config is not readable here: its shipped snapshot
        policy = _snapshot_policy(context) or policy
    hardware = context.cfg.hardware
    gpus = (
        profile_gpus(dataclasses.asdict(hardware)) if not hardware.detect else context.machine.gpus
    )
    on_gpu = placement is None or placement.device == "cuda"
    capacity = min((g.memory_gib for g in gpus), default=0.0) if on_gpu else 0.0
    return stage_memory(
        MemoryInputs(
            stage=stage,
            kind=context.model.kind,
            files=context.inputs.model.files,
            policy=policy,
            longest=rows.longest,
            placement=placement,
            capacity_gib=capacity or None,
            zero=_zero(decided.trainer),
            name=context.name,
            longest_tokens=context.inputs.longest_tokens,
            adapter_dtype=stage_precision(stage, Decided(policy, rows), placement).adapters
            or "float32",
            frozen=frozen,
        )
    )


def stage_precision(
    stage: StageConfig, decided: Decided, placement: PlacementPlan | None
) -> PrecisionPlan:
    """The stage's dtypes (`plan.precision`): quantized as placed (`placement` None: as asked,
    before placing), also where the quantized modules wait for the model to load (a deferred
    policy). The weights' dtypes do not depend on the trainer settings, so the memory estimate
    reads them before those are decided."""
    policy, trainer = decided.policy, decided.trainer
    bits = placement.quantization if placement else library_keys.quant_bits(stage.quantization)
    config = policy.quantization.config if policy.quantization else stage.quantization or {}
    quantized = k_bit_storage(bits, config) if bits != "none" else None
    lora = policy.lora is not None
    return decide_precision(stage.dtype, quantized=quantized, lora=lora, trainer=trainer)


def _snapshot_policy(context: StageContext) -> PolicyPlan | None:
    """The stage's policy decided on the shipped snapshot of its hub model; None without a
    snapshot or when the policy does not apply to it."""
    snapshot = context.inputs.model.snapshot
    if snapshot is None:
        return None
    try:
        return decide_policy(context.name, context.stage, context.model, snapshot)
    except RecipeError:
        return None


def _model_config(context: StageContext) -> JsonObject | None:
    files = context.inputs.model.files
    return files.config if files else None


def stage_facts(
    context: StageContext, decided: Decided, placement: PlacementPlan | None
) -> StageFacts:
    """The stage as planned so far, as plain data for its kind's checks and capabilities (a
    capability is planned before placement: the models it holds decide where the stage
    fits; the kind's checks after)."""
    rows, policy = decided.rows, decided.policy

    def sample(count: int) -> tuple[Mapping[str, Any], ...]:
        train = rows.splits().train
        return tuple(train[i] for i in range(min(count, len(train))))

    return StageFacts(
        name=context.name,
        train=context.stage.train,
        train_rows=rows.train_rows,
        world_size=placement.world_size if placement else 0,
        rows=rows.describe(),
        labels=rows.labels,
        device=placement.device if placement else "",
        config=dataclasses.asdict(context.stage),
        images=has_images(rows.format),
        lora=policy.lora is not None,
        params=sum((policy.param_counts or {}).values()),
        sample=sample,
        vocabulary=vocabulary(context.inputs.model.files),
        inputs={
            role: InputStage(
                loaded.name,
                loaded.fingerprint,
                sum((loaded.policy.param_counts or {}).values()),
                loaded.evaluate_only,
                vocabulary(context.loaded_files.get(role)),
            )
            for role, loaded in context.loaded.items()
        },
    )


def vocabulary(files: ModelFiles | None) -> Vocabulary | None:
    """A model's tokenizer as `resolve` read it, without loading it (None: nothing read)."""
    if files is None:
        return None
    config = files.config
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    size = config.get("vocab_size") or (text or {}).get("vocab_size")
    return Vocabulary(size, dict(files.tokenizer.files) if files.tokenizer else {})


def plugin_notes(stage: StageConfig, rows: Rows) -> list[str]:
    """Where the stage trains with a plug-in's kind or reads a plug-in's format."""
    used = [
        ("trainer", used_by("trainers", stage.trainer)),
        ("format", used_by("formats", rows.source)),
    ]
    return [
        f"{what} `{plugin.name}` from plug-in {plugin.distribution} {plugin.version} "
        f"({plugin.target}; its code enters the key)"
        for what, plugin in used
        if plugin is not None
    ]


def stage_notes(policy: PolicyPlan, context: StageContext) -> list[str]:
    model, init = context.model, context.init
    if context.stage.evaluate_only:
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
