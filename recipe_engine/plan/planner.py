"""Recipe + its resolved inputs -> `RecipePlan`: every stage decided before weights load.

Pure: the inputs (`resolve.inputs.RecipeInputs`) hold everything read from the world, so
this module reads no file, asks no hub and imports no torch. `check_recipe` refuses what the
recipe alone gets wrong (before anything is read); `plan_recipe` reads as the list of
decisions, stage by stage, in graph order: policy -> rows -> placement -> loss -> trainer
settings -> memory, then the keys of all stages.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from recipe_engine.config import library_keys
from recipe_engine.config.bounds import check_engine_values
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import EngineConfig, ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.launchers.registry import check_launch, launcher_kind
from recipe_engine.plan import dag
from recipe_engine.plan.determinism import Determinism, decide_determinism
from recipe_engine.plan.hardware import parse_gpus, profile_gpus
from recipe_engine.plan.kernels import KernelChoice, checkpointing_needed, decide_liger
from recipe_engine.plan.keys import check_duplicates, stage_key
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.memory_inputs import MemoryInputs, stage_memory
from recipe_engine.plan.packing import (
    PackingChoice,
    PackingFacts,
    attention_implementation,
    check_attention_trains_on,
    decide_packing,
)
from recipe_engine.plan.placement import (
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    plan_placement,
)
from recipe_engine.plan.policy import decide_policy, evaluation_policy
from recipe_engine.plan.precision import PrecisionPlan, decide_precision, k_bit_storage
from recipe_engine.plan.preference import (
    check_reference_settings,
    check_rows_fit_trainer,
    checked_by_its_kind,
    choose_trainer,
    trainer_notes,
)
from recipe_engine.plan.recipe_plan import PolicyPlan, RecipePlan, StagePlan
from recipe_engine.plan.rewards import plan_rewards, rewards_note
from recipe_engine.plan.rows import check_held_out_rows, rows_through_template
from recipe_engine.plan.stage_settings import (
    check_stage_name,
    check_stage_settings,
    resolved_stages,
)
from recipe_engine.plan.teacher import check_teacher_setting, teacher_params, teacher_plan
from recipe_engine.plan.trainer_settings import (
    ZeroSettings,
    choose_loss,
    deepspeed_settings,
    trainer_settings,
    zero_settings,
    zero_stage,
)
from recipe_engine.resolve.formats import has_images, is_prompt_completion
from recipe_engine.resolve.inputs import RecipeInputs, Rows, StageInputs
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.sources import InitSource, check_model_entry
from recipe_engine.rewards import Reward
from recipe_engine.trainers import TRAINERS

# Components only image tokens reach.
VISION_SIDE = {"vision_tower", "projector"}
# Training memory per trainable parameter: fp32 gradient + two AdamW moments.
TRAINABLE_BYTES = 12
# `parallel` values under which a stage's placement is the plan's to choose.
AUTO_PLACED = ("auto", "single")
BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "float16": 2, "4bit": 0.5, "8bit": 1}


@dataclass(frozen=True)
class StageContext:
    """One stage being planned: the recipe, the machine, the stage's settings and inputs."""

    cfg: EngineConfig
    machine: Machine
    name: str
    stage: StageConfig  # dtypes resolved
    inputs: StageInputs
    teacher: StagePlan | None = None  # a distilling stage's teacher, planned before it

    @property
    def init(self) -> InitSource:
        return self.inputs.model.init

    @property
    def model(self) -> ModelConfig:
        return self.inputs.model.entry


def check_recipe(cfg: EngineConfig) -> dag.StageGraph:
    """What the recipe alone gets wrong, refused before anything is read; its stage graph."""
    check_engine_values(cfg.seed, dataclasses.asdict(cfg.eval))
    check_model_entry(cfg.model)
    check_launch(cfg)
    stages = resolved_stages(cfg)
    for name, stage in stages.items():
        check_stage_settings(name, stage)
        check_teacher_setting(name, stage)
    graph = dag.build_graph(
        {n: dataclasses.asdict(s) for n, s in stages.items()}, cfg.recipe.targets
    )
    for key, names in (("only", cfg.only), ("force", cfg.force)):
        for name in names:
            check_stage_name(name, stages, key)
    return graph


def plan_recipe(cfg: EngineConfig, graph: dag.StageGraph, inputs: RecipeInputs) -> RecipePlan:
    stages = resolved_stages(cfg)
    planned: dict[str, StagePlan] = {}
    shared: dict[tuple[str, str], Rows] = {}  # rows read one way, shared by the stages
    for name in graph.order:
        given = inputs.stages[name]
        teacher = teacher_plan(name, graph.teachers.get(name), planned, inputs.stages)
        context = StageContext(cfg, inputs.machine, name, stages[name], given, teacher)
        parent = planned[graph.parents[name]] if graph.parents[name] else None
        planned[name] = _plan_stage(context, parent, graph.children(name), shared)
    check_duplicates({name: stage.fingerprint for name, stage in planned.items()})
    return RecipePlan(cfg.recipe.name, cfg, graph, planned, inputs.machine, cfg.hardware.name)


def _plan_stage(
    context: StageContext,
    parent: StagePlan | None,
    children: list[str],
    shared: dict[tuple[str, str], Rows],
) -> StagePlan:
    name, stage = context.name, context.stage
    if stage.evaluate_only:
        policy = evaluation_policy(name, stage, children)
    else:
        policy = decide_policy(name, stage, context.model, context.inputs.model.inventory)
    rows = rows_through_template(context.inputs, shared)
    stage, chosen_by = choose_trainer(name, stage, rows)
    context, packing = _packed(dataclasses.replace(context, stage=stage), rows)
    context, policy, checkpoint_notes = _checkpointed(context, policy, rows)
    placement = _place(context, policy, rows)
    _check_attention(context, placement)
    context, kernels = _kernels(context, placement)
    policy = _as_placed(policy, placement)
    check_rows_fit_trainer(name, context.stage, rows)
    context, rewards = _rewarded(context, rows)
    stage = context.stage
    check_reference_settings(name, stage, policy, rows)
    kind_notes = checked_by_its_kind(name, stage, rows, placement)
    stage, loss_notes = _loss_follows_data(context, rows)
    held_out_notes = check_held_out_rows(name, stage, rows, context.cfg.eval.enabled)
    _check_rows_reach_training(name, policy, rows)
    determinism = _determinism(context.cfg, stage, placement)
    trainer, autocast = _trainer(dataclasses.replace(context, stage=stage), placement, rows)
    planned = StagePlan(
        name=name,
        fingerprint="",  # hashed from the rest, below
        parent=parent.name if parent else None,
        config=stage,
        init=context.init,
        model=context.model,
        data=rows,
        policy=policy,
        dtype=stage.dtype,
        precision=_precision(stage, policy, placement, trainer),
        placement=placement,
        trainer={**trainer, "full_determinism": determinism.deterministic_kernels},
        determinism=determinism,
        rewards=rewards,
        notes=[
            *_notes(policy, context),
            *trainer_notes(name, stage, policy, chosen_by),
            *kind_notes,
            *rewards_note(rewards),
            *loss_notes,
            *packing.notes,
            *packing.tokens_note(placement.world_size),
            *kernels.notes,
            *checkpoint_notes,
            *held_out_notes,
            *autocast,
        ],
        memory=_memory(context, policy, rows, placement, _zero(trainer)),
    )
    return dataclasses.replace(planned, fingerprint=_stage_key(context, planned, parent))


def _stage_key(context: StageContext, planned: StagePlan, parent: StagePlan | None) -> str:
    """The stage's key (`plan.keys`): its parent's and its teacher's keys among its sources."""
    return stage_key(context.cfg, planned, parent, context.teacher)


def _check_attention(context: StageContext, placement: PlacementPlan) -> None:
    """The model's attention has a backward pass where the stage trains."""
    if not context.stage.evaluate_only:
        attention = attention_implementation(_model_config(context))
        check_attention_trains_on(context.name, attention, placement.device)


def _as_placed(policy: PolicyPlan, placement: PlacementPlan) -> PolicyPlan:
    """The policy without quantization where the placement skips it (bitsandbytes cannot run
    there: recorded as the placement's fallback)."""
    if placement.quantization == "none":
        return dataclasses.replace(policy, quantization=None)
    return policy


def _rewarded(context: StageContext, rows: Rows) -> tuple[StageContext, tuple[Reward, ...]]:
    """The stage with its rewards' weights among its `train` keys, and its rewards."""
    stage, rewards = plan_rewards(context.name, context.stage, rows)
    return dataclasses.replace(context, stage=stage), rewards


def _trainer(
    context: StageContext, placement: PlacementPlan, rows: Rows
) -> tuple[LibraryKwargs, list[str]]:
    """The trainer's settings, and the note where a float32 stage trains under bf16 autocast."""
    stage = context.stage
    trainer = trainer_settings(
        stage, placement, context.cfg.seed, context.model.kind, rows.eval_rows > 0
    )
    if placement.mode == "deepspeed":
        trainer["deepspeed"] = deepspeed_settings(context.inputs.deepspeed)
    autocast = _bf16_autocast(context, placement)
    if autocast:
        trainer["bf16"] = True
    return trainer, autocast


def _bf16_autocast(context: StageContext, placement: PlacementPlan) -> list[str]:
    """A stage left at `dtype: auto` on a float32 model entry trains on a GPU as the Trainer's
    `bf16=True` does: float32 weights, bf16 autocast (the tiny and SmolLM2 entries are float32
    for CPUs). A stage that names float32 keeps pure float32. The note says which happened."""
    asked = context.cfg.stage[context.name].dtype
    if not (asked == "auto" and context.stage.dtype == "float32" and placement.device == "cuda"):
        return []
    return [
        "float32 weights with bf16 autocast on cuda (dtype: auto); "
        f"`stage.{context.name}.dtype=float32` trains in pure float32"
    ]


def _determinism(cfg: EngineConfig, stage: StageConfig, placement: PlacementPlan) -> Determinism:
    """`deterministic=true`, or the stage's own `train.full_determinism`, asks for
    deterministic kernels; what that buys depends on the device."""
    asked = cfg.deterministic or bool(stage.train.get("full_determinism"))
    quantized = placement.quantization != "none"
    return decide_determinism(placement.device, deterministic=asked, quantized=quantized)


def _check_rows_reach_training(name: str, policy: PolicyPlan, rows: Rows) -> None:
    """Text-only rows never pass through the vision tower or projector: a stage training
    only those would fail at its first backward pass (no gradient reaches them)."""
    trained = set(policy.trained_components)
    if has_images(rows.format) or not trained or not trained <= VISION_SIDE:
        return
    raise RecipeError(
        f"Stage `{name}` trains only {', '.join(sorted(trained))}, but its data "
        f"({rows.describe()}) has no images, so nothing it trains would get a gradient. "
        "Give it image rows (data.format=vlm, an images column), or train the language model "
        f"too (stage.{name}.freeze.components, stage.{name}.lora).",
        key=f"stage.{name}.data",
    )


# --------------------------------------------------------------------------- placement


def _place(context: StageContext, policy: PolicyPlan, rows: Rows) -> PlacementPlan:
    name, stage = context.name, context.stage
    request = placement_request(
        context.cfg, context.machine, stage, _footprint_gib(context, policy)
    )
    # The estimated peak on one device decides fit / refuse (the rough footprint only
    # where no config is at hand to estimate from).
    single = _memory(context, policy, rows, None)
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


def _footprint_gib(context: StageContext, policy: PolicyPlan) -> float:
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


def _memory(
    context: StageContext,
    policy: PolicyPlan,
    rows: Rows,
    placement: PlacementPlan | None,
    zero: ZeroSettings | None = None,
) -> StageMemory | None:
    """The stage's estimated peak per device (`placement` None: on one GPU, before placing;
    `zero`: a DeepSpeed stage's settings)."""
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
            zero=zero,
            name=context.name,
            longest_tokens=context.inputs.longest_tokens,
            adapter_dtype=_precision(stage, policy, placement, {}).adapters or "float32",
            teacher_params=teacher_params(context.teacher),
        )
    )


def _precision(
    stage: StageConfig, policy: PolicyPlan, placement: PlacementPlan | None, trainer: LibraryKwargs
) -> PrecisionPlan:
    """The stage's dtypes (`plan.precision`): quantized as placed (`placement` None: as asked,
    before placing), also where the quantized modules wait for the model to load (a deferred
    policy). The weights' dtypes do not depend on the trainer settings, so the memory estimate
    reads them before those are decided."""
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


# --------------------------------------------------------------------------- packing, kernels


def _model_config(context: StageContext) -> JsonObject | None:
    files = context.inputs.model.files
    return files.config if files else None


def _packed(context: StageContext, rows: Rows) -> tuple[StageContext, PackingChoice]:
    """The stage with packing / padding-free as they can run (`plan.packing`)."""
    config = _model_config(context)
    facts = PackingFacts(
        name=context.name,
        trainer=TRAINERS[context.stage.trainer],
        model_type=(config or {}).get("model_type"),
        attention=attention_implementation(config),
        image_rows=has_images(rows.format),
    )
    choice = decide_packing(context.stage.train, facts)
    stage = dataclasses.replace(context.stage, train=choice.train)
    return dataclasses.replace(context, stage=stage), choice


def _checkpointed(
    context: StageContext, policy: PolicyPlan, rows: Rows
) -> tuple[StageContext, PolicyPlan, list[str]]:
    """Gradient checkpointing turned on where the estimate fits one GPU only with it (a stage
    that places itself: `parallel` auto or single, not on the CPU)."""
    cfg = context.cfg
    if context.stage.evaluate_only or cfg.device == "cpu" or cfg.parallel not in AUTO_PLACED:
        return context, policy, []
    why = checkpointing_needed(_memory(context, policy, rows, None))
    if why is None:
        return context, policy, []
    stage = dataclasses.replace(context.stage, gradient_checkpointing=True)
    policy = dataclasses.replace(policy, gradient_checkpointing=True)
    return dataclasses.replace(context, stage=stage), policy, [why]


def _kernels(context: StageContext, placement: PlacementPlan) -> tuple[StageContext, KernelChoice]:
    """The stage with `use_liger_kernel` where Liger's kernels run (`plan.kernels`)."""
    model_type = (_model_config(context) or {}).get("model_type")
    choice = decide_liger(context.stage.train, placement.device, model_type)
    stage = dataclasses.replace(context.stage, train=choice.train)
    return dataclasses.replace(context, stage=stage), choice


# --------------------------------------------------------------------------- loss and notes


def _loss_follows_data(context: StageContext, rows: Rows) -> tuple[StageConfig, list[str]]:
    """The stage with the loss flag its rows call for (`choose_loss`) among its `train`
    keys, so that the flag enters the stage key, and the note `plan` prints about it."""
    stage = context.stage
    if stage.evaluate_only or not TRAINERS[stage.trainer].demonstrations:  # no loss flags
        return stage, []
    support = "" if is_prompt_completion(rows.format) else context.inputs.model.template.support
    choice = choose_loss(context.name, stage.train, rows.format, support)
    train = {**stage.train, **choice.flags}
    return dataclasses.replace(stage, train=train), [choice.note]


def _notes(policy: PolicyPlan, context: StageContext) -> list[str]:
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
