"""The steps `plan_recipe` takes for every stage (`STEPS`, in order, each once): policy, rows,
trainer, the rows against the trainer, what the kind's capabilities add, packing,
checkpointing, placement, the dtype the CPU computes, kernels, quantization as placed, the
kind's own checks, loss, held-out rows, determinism, trainer settings, memory. Each takes the
stage as decided so far (`Draft`) and returns it with its own decision, or refuses it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.capabilities import (
    CapabilityPlan,
    FrozenModel,
)
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import EngineConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.determinism import Determinism, decide_determinism
from recipe_engine.plan.kernels import KernelChoice, checkpointing_needed, decide_liger
from recipe_engine.plan.keys import stage_key
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.packing import (
    PackingChoice,
    PackingFacts,
    check_attention_trains_on,
    decide_packing,
)
from recipe_engine.plan.placement import (
    PlacementPlan,
)
from recipe_engine.plan.policy import decide_policy, evaluation_policy
from recipe_engine.plan.preference import check_rows_fit_trainer, choose_trainer, trainer_notes
from recipe_engine.plan.recipe_plan import PolicyPlan, StagePlan
from recipe_engine.plan.rows import check_held_out_rows, rows_through_template
from recipe_engine.plan.stage_context import (
    Decided,
    StageContext,
    footprint_gib,
    place_stage,
    plugin_notes,
    stage_estimate,
    stage_facts,
    stage_notes,
    stage_precision,
)
from recipe_engine.plan.stage_settings import (
    asked_dtype,
    with_dtype,
)
from recipe_engine.plan.trainer_settings import (
    choose_loss,
    deepspeed_settings,
    trainer_settings,
)
from recipe_engine.resolve.formats import has_images, is_prompt_completion
from recipe_engine.resolve.inputs import Rows
from recipe_engine.trainers import TRAINERS, kinds_having, known_capabilities

# Components only image tokens reach.
VISION_SIDE = {"vision_tower", "projector"}


# `parallel` values under which a stage's placement is the plan's to choose.
AUTO_PLACED = ("auto", "single")


@dataclass(frozen=True)
class Draft:
    """One stage as the pipeline has decided it so far: each step (`STEPS`) takes it and
    returns it with its own decision, and may refuse the stage (RecipeError)."""

    context: StageContext  # its settings (`context.stage`) as decided so far
    parent: StagePlan | None
    children: tuple[str, ...]
    shared: dict[tuple[str, str], Rows]  # rows read one way, shared by the recipe's stages
    policy: PolicyPlan | None = None
    rows: Rows | None = None
    chosen_by: str = ""  # why `trainer: auto` chose the stage's kind ("" : named)
    packing: PackingChoice | None = None
    checkpointing: tuple[str, ...] = ()
    placement: PlacementPlan | None = None
    dtype_notes: tuple[str, ...] = ()
    kernels: KernelChoice | None = None
    added: tuple[CapabilityPlan, ...] = ()
    kind_notes: tuple[str, ...] = ()
    loss_notes: tuple[str, ...] = ()
    held_out_notes: tuple[str, ...] = ()
    determinism: Determinism | None = None
    trainer: LibraryKwargs = field(default_factory=dict)
    autocast: tuple[str, ...] = ()
    memory: StageMemory | None = None

    @property
    def name(self) -> str:
        return self.context.name

    @property
    def stage(self) -> StageConfig:
        return self.context.stage

    @property
    def frozen(self) -> tuple[FrozenModel, ...]:
        """The models the stage's capabilities hold frozen beside it (on the estimate)."""
        return tuple(model for added in self.added for model in added.frozen)

    @property
    def decided(self) -> Decided:
        assert self.policy and self.rows
        return Decided(self.policy, self.rows, self.frozen, self.trainer)

    def with_stage(self, stage: StageConfig, **decided: Any) -> Draft:
        context = dataclasses.replace(self.context, stage=stage)
        return dataclasses.replace(self, context=context, **decided)

    def planned(self) -> StagePlan:
        """The stage's plan, its key hashed from the rest (`plan.keys`)."""
        assert self.policy and self.rows and self.placement and self.determinism
        stage = self.stage
        plan = StagePlan(
            name=self.name,
            fingerprint="",
            parent=self.parent.name if self.parent else None,
            config=stage,
            init=self.context.init,
            model=self.context.model,
            data=self.rows,
            policy=self.policy,
            dtype=stage.dtype,
            precision=stage_precision(stage, self.decided, self.placement),
            placement=self.placement,
            trainer={**self.trainer, "full_determinism": self.determinism.deterministic_kernels},
            determinism=self.determinism,
            notes=self._notes(),
            memory=self.memory,
            added=self.added,
            inputs={role: loaded.name for role, loaded in self.context.loaded.items()},
        )
        return dataclasses.replace(plan, fingerprint=stage_key(self.context.cfg, plan, self.parent))

    def _notes(self) -> list[str]:
        assert self.policy and self.packing and self.kernels and self.placement
        return [
            *stage_notes(self.policy, self.context),
            *trainer_notes(self.stage, self.chosen_by),
            *(note for added in self.added for note in added.notes),
            *self.kind_notes,
            *self.loss_notes,
            *self.dtype_notes,
            *self.packing.notes,
            *self.packing.tokens_note(self.placement.world_size),
            *self.kernels.notes,
            *self.checkpointing,
            *self.held_out_notes,
            *self.autocast,
            *plugin_notes(self.stage, self.rows),
        ]


def decide_the_policy(draft: Draft) -> Draft:
    """What the stage freezes, trains in full, adapts and quantizes (`plan.policy`); an
    evaluation stage trains nothing."""
    name, stage, context = draft.name, draft.stage, draft.context
    if stage.evaluate_only:
        return dataclasses.replace(draft, policy=evaluation_policy(name, stage, draft.children))
    inventory = context.inputs.model.inventory
    return dataclasses.replace(draft, policy=decide_policy(name, stage, context.model, inventory))


def read_the_rows(draft: Draft) -> Draft:
    """The rows as the stage reads them: through the chat template where it applies."""
    return dataclasses.replace(
        draft, rows=rows_through_template(draft.context.inputs, draft.shared)
    )


def choose_the_trainer(draft: Draft) -> Draft:
    """`trainer: auto` resolved from the rows (`plan.preference`)."""
    assert draft.rows
    stage, chosen_by = choose_trainer(draft.name, draft.stage, draft.rows)
    return draft.with_stage(stage, chosen_by=chosen_by)


def decide_packing_step(draft: Draft) -> Draft:
    """Packing / padding-free as they can run (`plan.packing`)."""
    assert draft.rows
    facts = PackingFacts(
        name=draft.name,
        trainer=TRAINERS[draft.stage.trainer],
        model_type=draft.context.model_type,
        attention=draft.context.attention,
        image_rows=has_images(draft.rows.format),
    )
    choice = decide_packing(draft.stage.train, facts)
    return draft.with_stage(dataclasses.replace(draft.stage, train=choice.train), packing=choice)


def decide_checkpointing(draft: Draft) -> Draft:
    """Gradient checkpointing turned on where the estimate fits one GPU only with it (a stage
    that places itself: `parallel` auto or single, not on the CPU)."""
    cfg, policy = draft.context.cfg, draft.policy
    assert policy
    if draft.stage.evaluate_only or cfg.device == "cpu" or cfg.parallel not in AUTO_PLACED:
        return draft
    why = checkpointing_needed(stage_estimate(draft.context, draft.decided))
    if why is None:
        return draft
    stage = dataclasses.replace(draft.stage, gradient_checkpointing=True)
    policy = dataclasses.replace(policy, gradient_checkpointing=True)
    return draft.with_stage(stage, policy=policy, checkpointing=(why,))


def place(draft: Draft) -> Draft:
    """Devices, processes and `n_gpu` (`plan.placement`), from the estimated peak; the
    model's attention checked to train there."""
    assert draft.policy and draft.rows
    placement = place_stage(draft.context, draft.decided)
    _check_attention(draft.context, placement)
    return dataclasses.replace(draft, placement=placement)


def fit_the_dtype_to_the_cpu(draft: Draft) -> Draft:
    """On a CPU that emulates bfloat16 (AVX2 only: no AVX512-BF16 or AMX), a stage whose
    recipe names no dtype computes in float32 where float32 fits the machine's memory, and says
    why; one that names bfloat16, or does not fit in float32, keeps it with a warning of the
    slowdown measured here."""
    context, placement, stage = draft.context, draft.placement, draft.stage
    assert placement and draft.policy and draft.rows
    cpu = context.machine.cpu
    if placement.device != "cpu" or stage.dtype != "bfloat16" or not cpu.emulates_bfloat16:
        return draft
    asked = context.cfg.stage[draft.name]
    slowdown = f"this CPU, {cpu.describe()}"
    if asked_dtype(asked, context.cfg.model) == "auto":
        as_float32 = with_dtype(stage, asked, "float32")
        need = _peak_gib(dataclasses.replace(context, stage=as_float32), draft)
        room = f"~{need:.1f} GiB of its {cpu.memory_gib:.0f} GiB"
        if need <= cpu.memory_gib:
            note = f"dtype: float32, not bfloat16 (dtype auto): {slowdown}; float32 fits ({room})"
            return draft.with_stage(as_float32, dtype_notes=(note,))
        warning = (
            f"stage {draft.name} computes in bfloat16 on {slowdown}: float32 would need "
            f"{room}. Expect its matmuls about that much slower than in float32, or train it "
            "on a GPU or a CPU with AVX512-BF16 or AMX."
        )
    else:
        where = f"stage.{draft.name}.dtype" if asked.dtype != "auto" else "model.dtype"
        warning = (
            f"`{where}=bfloat16` kept on {slowdown}; expect its matmuls about that much slower "
            f"than in float32 (`{where}=auto` trains in float32 here where it fits)."
        )
    placement = dataclasses.replace(placement, warnings=(*placement.warnings, warning))
    return dataclasses.replace(draft, placement=placement)


def _peak_gib(context: StageContext, draft: Draft) -> float:
    """The stage's estimated peak as `context.stage` asks, where an estimate can be made (the
    rough footprint where no config is at hand)."""
    assert draft.policy and draft.rows
    memory = stage_estimate(context, draft.decided, draft.placement)
    return memory.estimate.peak if memory else footprint_gib(context, draft.policy)


def choose_kernels(draft: Draft) -> Draft:
    """`use_liger_kernel` where Liger's kernels run (`plan.kernels`)."""
    assert draft.placement
    model_type = draft.context.model_type
    choice = decide_liger(draft.stage.train, draft.placement.device, model_type)
    return draft.with_stage(dataclasses.replace(draft.stage, train=choice.train), kernels=choice)


def quantize_as_placed(draft: Draft) -> Draft:
    """The policy without quantization where the placement skips it (bitsandbytes cannot run
    there: recorded as the placement's fallback)."""
    assert draft.policy and draft.placement
    if draft.placement.quantization == "none":
        return dataclasses.replace(
            draft, policy=dataclasses.replace(draft.policy, quantization=None)
        )
    return draft


def check_the_rows_fit(draft: Draft) -> Draft:
    """The stage's trainer takes its rows (`plan.preference`)."""
    assert draft.rows
    check_rows_fit_trainer(draft.name, draft.stage, draft.rows)
    return draft


def plan_the_capabilities(draft: Draft) -> Draft:
    """What the stage's kind adds beyond its rows, each capability deciding its own part
    (`capabilities`): its keys among `train`, its checks and notes, its key parts, the user's
    code, frozen models, what `run` loads."""
    if draft.stage.evaluate_only:
        return draft
    check_capability_settings(draft.name, draft.stage)
    facts = stage_facts(draft.context, draft.decided, draft.placement)
    added = tuple(
        capability.plan(facts) for capability in TRAINERS[draft.stage.trainer].capabilities
    )
    train = {**draft.stage.train}
    for planned in added:
        train.update(planned.train)
    return draft.with_stage(dataclasses.replace(draft.stage, train=train), added=added)


def check_with_the_kind(draft: Draft) -> Draft:
    """What the stage's trainer kind refuses of it, else what it says (`TrainerKind`)."""
    if draft.stage.evaluate_only:
        return draft
    kind = TRAINERS[draft.stage.trainer]
    facts = stage_facts(draft.context, draft.decided, draft.placement)
    kind.check_plan(facts)
    return dataclasses.replace(draft, kind_notes=tuple(kind.plan_notes(facts)))


def choose_the_loss(draft: Draft) -> Draft:
    """The loss flag the rows call for (`choose_loss`) among the `train` keys, so that it
    enters the stage key, and the note `plan` prints about it."""
    stage, rows = draft.stage, draft.rows
    assert rows
    if stage.evaluate_only or not TRAINERS[stage.trainer].demonstrations:  # no loss flags
        return draft
    support = (
        "" if is_prompt_completion(rows.format) else draft.context.inputs.model.template.support
    )
    choice = choose_loss(draft.name, stage.train, rows.format, support)
    train = {**stage.train, **choice.flags}
    return draft.with_stage(dataclasses.replace(stage, train=train), loss_notes=(choice.note,))


def check_the_held_out_rows(draft: Draft) -> Draft:
    """Held-out rows where the stage is evaluated (`plan.rows`); every trained component
    reached by the rows."""
    assert draft.rows and draft.policy
    evaluated = draft.context.cfg.eval.enabled
    notes = check_held_out_rows(draft.name, draft.stage, draft.rows, evaluated)
    _check_rows_reach_training(draft.name, draft.policy, draft.rows)
    return dataclasses.replace(draft, held_out_notes=tuple(notes))


def decide_determinism_step(draft: Draft) -> Draft:
    """What the stage's weights can be trusted to repeat (`plan.determinism`)."""
    assert draft.placement
    determinism = _determinism(draft.context.cfg, draft.stage, draft.placement)
    return dataclasses.replace(draft, determinism=determinism)


def settle_the_trainer(draft: Draft) -> Draft:
    """The trainer's settings (`plan.trainer_settings`), and bf16 autocast where a float32
    stage trains under it."""
    assert draft.placement and draft.rows
    trainer, autocast = _trainer(draft.context, draft.placement, draft.rows)
    return dataclasses.replace(draft, trainer=trainer, autocast=tuple(autocast))


def estimate_the_memory(draft: Draft) -> Draft:
    """The stage's estimated peak on the device it is placed on (`plan.memory`)."""
    assert draft.policy and draft.rows and draft.placement
    memory = stage_estimate(draft.context, draft.decided, draft.placement)
    return dataclasses.replace(draft, memory=memory)


# The steps `plan_recipe` takes for every stage, in this order, each once.
STEPS = (
    decide_the_policy,
    read_the_rows,
    choose_the_trainer,
    check_the_rows_fit,
    plan_the_capabilities,
    decide_packing_step,
    decide_checkpointing,
    place,
    fit_the_dtype_to_the_cpu,
    choose_kernels,
    quantize_as_placed,
    check_with_the_kind,
    choose_the_loss,
    check_the_held_out_rows,
    decide_determinism_step,
    settle_the_trainer,
    estimate_the_memory,
)


def check_capability_settings(name: str, stage: StageConfig) -> None:
    """Every capability's config sections checked against the stage's kind: set where the
    kind has the capability, and only there."""
    config = dataclasses.asdict(stage)
    for capability in known_capabilities():
        capability.check_config(name, config, stage.trainer, kinds_having(capability))


def _check_attention(context: StageContext, placement: PlacementPlan) -> None:
    """The model's attention has a backward pass where the stage trains."""
    if not context.stage.evaluate_only:
        attention = context.attention
        check_attention_trains_on(context.name, attention, placement.device)


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
