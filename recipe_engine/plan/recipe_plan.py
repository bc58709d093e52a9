"""The plan: typed objects that `plan` prints and `run` executes, field for field.

Everything here is decided before any weight is read (see `plan.planner`). The run layer
takes a `StagePlan` and recomputes none of it: where the weights come from, which rows it
trains on, what is frozen / adapted / quantized and with which exact library settings, where
the model goes and with which trainer settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recipe_engine.capabilities import CapabilityPlan, FrozenModel, Load, StageCode
from recipe_engine.config.components import Layout
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.config.schema import EngineConfig, ModelConfig, StageConfig
from recipe_engine.launchers.kinds import StageJob
from recipe_engine.plan.dag import StageGraph
from recipe_engine.plan.determinism import Determinism
from recipe_engine.plan.memory_fit import StageMemory
from recipe_engine.plan.placement import PlacementPlan
from recipe_engine.plan.precision import PrecisionPlan
from recipe_engine.resolve.inputs import Rows
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.sources import InitSource


@dataclass
class AdapterPlan:
    """LoRA: the components it adapts, the exact modules, and the LoraConfig arguments."""

    components: list[str]
    targets: list[str]
    config: LibraryKwargs  # LoraConfig(**config): target_modules, modules_to_save, r, ...


@dataclass
class QuantPlan:
    """bitsandbytes: the BitsAndBytesConfig arguments, skip-modules resolved."""

    bits: str  # 4bit | 8bit
    components: list[str]
    config: LibraryKwargs  # BitsAndBytesConfig(**config) once dtype names become dtypes


@dataclass
class PolicyPlan:
    """What a stage trains: frozen, fully trained and adapted components, and quantization."""

    layout: Layout | None  # which parameters form which component; None: config unreadable
    frozen: list[str]
    freeze_patterns: list[str]
    trained: list[str]  # trained in full
    gradient_checkpointing: bool
    lora: AdapterPlan | None = None
    quantization: QuantPlan | None = None
    param_counts: dict[str, int] | None = None  # per component; None: config unreadable here
    # Per fully trained component, the parameters `freeze.patterns` leave trainable.
    trainable_params: dict[str, int] | None = None
    # For the memory estimate (plan.memory): LoRA's own parameters, and the weights stored
    # in 4/8 bits (the quantized components' linear weights, bar skip-modules).
    lora_params: int | None = None
    quantized_params: int | None = None

    @property
    def deferred(self) -> bool:
        """Module-level checks wait for load time (the model's config was unreachable)."""
        return self.param_counts is None

    @property
    def bits(self) -> str:
        return self.quantization.bits if self.quantization else "none"

    @property
    def trained_components(self) -> list[str]:
        return self.trained + (self.lora.components if self.lora else [])

    def trained_share(self, component: str) -> float | None:
        """The share of a fully trained component's parameters it trains, when freeze.patterns
        freeze part of it (None: all of it, or not known before the model loads)."""
        total = (self.param_counts or {}).get(component)
        trained = (self.trainable_params or {}).get(component)
        if not total or trained is None or trained >= total:
            return None
        return trained / total


@dataclass(frozen=True)
class StagePlan:
    name: str
    fingerprint: str
    parent: str | None
    config: StageConfig  # the stage's settings, dtypes resolved
    init: InitSource
    model: ModelConfig  # the model entry the stage's weights descend from
    data: Rows  # the rows as this stage reads them (`rendering` says how)
    policy: PolicyPlan
    dtype: str
    precision: PrecisionPlan  # every parameter's dtype and the activations', in every phase
    placement: PlacementPlan
    trainer: LibraryKwargs  # SFTConfig arguments, all but output_dir (the store's)
    determinism: Determinism
    notes: list[str] = field(default_factory=list)
    memory: StageMemory | None = None  # the estimated peak; None: no config to estimate from
    # What its kind's capabilities decided (`capabilities.CapabilityPlan`), and the other
    # stages they load, by role (a distilling stage's teacher).
    added: tuple[CapabilityPlan, ...] = ()
    inputs: dict[str, str] = field(default_factory=dict)

    @property
    def evaluate_only(self) -> bool:
        return self.config.evaluate_only

    @property
    def loads(self) -> tuple[Load, ...]:
        """What `run` loads for its capabilities and hands its trainer."""
        return tuple(load for added in self.added for load in added.loads)

    @property
    def code(self) -> tuple[StageCode, ...]:
        """The user's code it runs, by content (a node of a cluster must find the same)."""
        return tuple(code for added in self.added for code in added.code)

    @property
    def frozen(self) -> tuple[FrozenModel, ...]:
        """Models held frozen beside the policy while it trains."""
        return tuple(model for added in self.added for model in added.frozen)


@dataclass(frozen=True)
class RecipePlan:
    recipe: str
    config: EngineConfig
    graph: StageGraph
    stages: dict[str, StagePlan]
    machine: Machine
    hardware: str
    notes: list[str] = field(default_factory=list)
    # a scheduled launcher: the job of every stage to submit (stored stages have none), in order
    jobs: dict[str, StageJob] = field(default_factory=dict)

    @property
    def cuda_visible_devices(self) -> str | None:
        values = {s.placement.cuda_visible_devices for s in self.stages.values()}
        return values.pop() if len(values) == 1 else None

    @property
    def starter_processes(self) -> int | None:
        """Processes to relaunch this command as (torchrun), or None to run in this one."""
        placement = next(iter(self.stages.values())).placement
        return placement.nproc if placement.starter == "self-torchrun" else None

    def parent_of(self, stage: StagePlan) -> StagePlan | None:
        return self.stages[stage.parent] if stage.parent else None

    def inputs_of(self, stage: StagePlan) -> dict[str, StagePlan]:
        """The other stages `stage` loads, by role."""
        return {role: self.stages[name] for role, name in stage.inputs.items()}
