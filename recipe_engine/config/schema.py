"""Structured configs: the single source of truth for the engine's keys and defaults.

Hydra validates every composed recipe against `EngineConfig`: unknown keys, wrong types and
a value outside a closed choice (`config.choices`) fail at composition. Library settings
(`train`, `lora`, `quantization`) are open mappings here because their keys belong to the
trainer kind's settings class (`trainers`), LoraConfig and BitsAndBytesConfig;
`library_keys` checks them against those classes.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from recipe_engine.config.choices import (
    DataSource,
    Device,
    DtypeChoice,
    ModelKind,
    ModelSource,
    Parallel,
)
from recipe_engine.config.library_objects import LibraryKwargs


@dataclass
class InitConfig:
    """Where a stage's weights come from: at most one of the three (none = the recipe's model)."""

    from_stage: str | None = None
    # a hub id, e.g. Qwen/Qwen2-VL-7B-Instruct, or a tiny built-in model's name (tiny-qwen2-large)
    model: str | None = None
    path: str | None = None  # a local save_pretrained folder or trainer checkpoint


@dataclass
class TeacherConfig:
    """The model a stage learns from by distillation (a kind that learns from a teacher):
    another stage of the recipe, whose weights `plan` orders first and the stage's key hashes.
    Unset (the default) on every other stage."""

    from_stage: str | None = None


@dataclass
class FreezeConfig:
    components: list[str] = field(default_factory=list)  # frozen components
    patterns: list[str] = field(default_factory=list)  # extra regexes over parameter names


@dataclass
class DataConfig:
    name: str = MISSING
    source: DataSource = DataSource.local
    path: str | None = None
    # auto | messages | prompt_completion | alpaca | preference | unpaired | sharegpt | firefly
    # | vlm | tools | language_modeling (resolve/formats.REGISTRY)
    format: str = "auto"
    columns: dict[str, str] = field(default_factory=dict)
    train_split: str = "train"
    eval_split: str | None = "eval"
    # The share of the training rows held out for evaluation when the data has no held-out
    # split of its own; null: automatic (resolve/held_out.py), 0: every row trains.
    eval_fraction: float | None = None
    max_samples: int | None = None
    # Plain-text prompt/completion rows through the model's chat template, as TRL's
    # conversational prompt-completion: auto (when the tokenizer has one) | true | false.
    chat_template: str = "auto"
    # data.source=hub: the branch, tag or commit to read (null: the default branch). `plan`
    # resolves it to a commit, which the key hashes; the first run pins the default branch.
    revision: str | None = None


# An open section of a recipe, as the user writes it (YAML, the command line), left open so
# that any key can be set: a stage's `data` keys over the recipe's, a model's `components`
# regexes. The engine checks its keys where it reads them (resolve.resolver.stage_data,
# config.components).
RecipeSection = dict[str, Any]

# Open sections of a stage: an empty library section means the stage does not use that
# library; an empty `data` means the recipe's data.
OPEN_SECTIONS = ("lora", "quantization", "data")


@dataclass
class RewardConfig:
    """One reward of an online stage (`trainer: grpo | rloo`): a built-in rule by `name`, or
    your function by `fn` (`package.module:function`, or `path/to/file.py:function` from where
    the engine runs), as TRL calls one: `(prompts, completions, completion_ids, **columns)` to
    one float per completion. TRL logs each under its name (`rewards/<name>/mean`)."""

    name: str | None = None  # exact_match | contains | format | length_penalty
    fn: str | None = None
    weight: float = 1.0  # its share of the total reward (TRL's `reward_weights`)
    column: str = "answer"  # exact_match, contains: the column holding the reference
    pattern: str | None = None  # format: the regular expression the whole answer matches
    max_length: int | None = None  # length_penalty: characters an answer may take freely


@dataclass
class StageConfig:
    template: str | None = None
    description: str = ""
    evaluate_only: bool = False  # a held-out evaluation of `init`, cached like any stage
    # auto, or a kind of recipe_engine/trainers/: TRL's trainer, whose settings class `train`
    # holds; auto: the one the stage's rows call for (plan says which)
    trainer: str = "auto"
    init: InitConfig = field(default_factory=InitConfig)
    freeze: FreezeConfig = field(default_factory=FreezeConfig)
    # Empty = not used; a mapping (not None) so that any key can be set on the command line,
    # e.g. stage.vision.lora.r=8 on a template without LoRA.
    lora: LibraryKwargs | None = field(default_factory=dict)  # LoraConfig keys + `components`
    quantization: LibraryKwargs | None = field(default_factory=dict)  # BitsAndBytesConfig keys
    dtype: DtypeChoice = DtypeChoice.auto  # auto: the model entry's
    gradient_checkpointing: bool = False
    # `data` keys that replace the recipe's for this stage (empty: the recipe's data), so
    # stage.<name>.data.path=... changes one key, like any other override.
    data: RecipeSection | None = field(default_factory=dict)
    train: LibraryKwargs = field(default_factory=dict)  # the trainer's settings (SFTConfig ...)
    # An online trainer's rewards (grpo, rloo): what scores the completions it generates.
    rewards: list[RewardConfig] = field(default_factory=list)
    # A distilling trainer's teacher: the stage whose weights it learns the next-token
    # distributions of (same tokenizer as this stage's model).
    teacher: TeacherConfig = field(default_factory=TeacherConfig)


def without_empty_sections(stage: StageConfig) -> StageConfig:
    """The stage with empty open sections as None (not used), as plans compare them; each
    section kept is a copy, so resolving it leaves the composed config as it was."""
    sections = {key: getattr(stage, key) for key in OPEN_SECTIONS}
    return dataclasses.replace(
        stage, **{key: dict(value) if value else None for key, value in sections.items()}
    )


@dataclass
class ModelConfig:
    name: str = MISSING
    source: ModelSource = ModelSource.hub
    id: str = MISSING  # hub repo id, tiny builder name or local folder
    revision: str | None = None
    kind: ModelKind = ModelKind.vlm
    # The compute dtype of its stages left at dtype=auto. auto: bfloat16, as the families
    # publish their weights and GPUs compute them, but float32 for a stage on a CPU that only
    # emulates bfloat16 (AVX2: no AVX512-BF16 or AMX) where float32 fits its memory (plan says).
    dtype: DtypeChoice = DtypeChoice.auto
    trust_remote_code: bool = False
    allow_pickle: bool = False  # load .bin/.pt weights (arbitrary code on unpickling)
    params_billion: float | None = None  # size estimate when the config cannot be read
    # A GGUF file (transformers' `gguf_file=`; weights are dequantized on load): with
    # source=hub its name in the repository `id`, with source=local its name in the folder `id`.
    gguf_file: str | None = None
    # Which parameters form which component: a layout of recipe_engine/config/layouts.yaml by
    # name (default: the one for the config's model_type; `none`: no map, select parameters by
    # freeze.patterns and target_modules), and/or regexes per component replacing its rules.
    layout: str | None = None
    components: RecipeSection = field(default_factory=dict)
    # Settings over the processor's saved config, as `AutoProcessor.from_pretrained(...,
    # **processor)` takes them (a VLM's image limits: Qwen2-VL's `max_pixels`, Idefics3's
    # `size: {longest_edge: ...}`); training, evaluation and the memory estimate all read them.
    processor: RecipeSection = field(default_factory=dict)
    # The base model's licence, as the model card's metadata names it (None: `other`).
    license: str | None = None


@dataclass
class GpuSpec:
    name: str = "GPU"
    memory_gib: float = MISSING


@dataclass
class HardwareConfig:
    name: str = "local"
    detect: bool = True  # read this machine; False: `gpus` below describe the GPUs a job gets
    gpus: list[GpuSpec] = field(default_factory=list)
    mps: bool = False


@dataclass
class EvalConfig:
    """Held-out evaluation by generation after each stage (greedy unless do_sample)."""

    enabled: bool = True
    compare: bool = True  # end a run with the base-vs-stages compare report
    max_new_tokens: int = 8
    batch_size: int = 16
    max_samples: int | None = None  # cap the held-out rows (None: all)
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class SlurmConfig:
    """`launcher=slurm`: how each stage's job is submitted (sbatch's options, sbatch's names).
    Left unset, a job is sized from its stage's plan: nodes, GPUs, CPUs and host memory."""

    partition: str | None = None  # None: the cluster's default partition
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: str = "04:00:00"  # sbatch --time: MINUTES, HH:MM:SS or D-HH:MM:SS
    cpus_per_task: int | None = None  # None: 8 per GPU, or one per CPU process
    mem_gb: float | None = None  # None: the plan's host-memory estimate
    # Seconds before the time limit at which SLURM signals the job: it requeues itself and
    # resumes from its last checkpoint (submitit's checkpointing).
    signal_delay_s: int = 120
    setup: list[str] = field(default_factory=list)  # shell lines before the job (module load)
    additional_parameters: LibraryKwargs = field(default_factory=dict)  # other sbatch options
    # A stage on several nodes: the port its first node's torchrun listens on for the others.
    # None: 20000 + the job id mod 20000 (every node reaches it alone, from SLURM_JOB_ID).
    master_port: int | None = None


@dataclass
class RayConfig:
    """`launcher=ray`: the running Ray cluster the stages go to, one Ray task per node of a
    stage. Left unset, a stage's tasks are sized from its plan: GPUs, CPUs and host memory."""

    # The cluster's address (`host:6379`, `ray://host:10001`, or `auto` on one of its nodes).
    # None: RAY_ADDRESS, the variable Ray's own CLI and `ray job submit` set.
    address: str | None = None
    num_cpus: int | None = None  # per node of a stage; None: 8 per GPU, or one per CPU process
    mem_gb: float | None = None  # per node of a stage; None: the plan's host-memory estimate
    # A stage whose node is lost runs again, from its last checkpoint, this many times.
    max_retries: int = 3
    # How long a stage waits for nodes that can hold it before it fails (it never hangs).
    placement_timeout_s: int = 600
    # Ray's runtime_env for every stage task: working_dir, py_modules, env_vars, pip, ...
    runtime_env: LibraryKwargs = field(default_factory=dict)


@dataclass
class RecipeInfo:
    name: str = MISSING
    description: str = ""
    targets: list[str] = field(default_factory=list)  # stages whose outputs matter; [] = sinks


@dataclass
class EngineConfig:
    recipe: RecipeInfo = field(default_factory=RecipeInfo)
    stage: dict[str, StageConfig] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    device: Device = Device.auto
    gpus: Any = None  # physical GPU ids: 6 | [6, 7]; sets CUDA_VISIBLE_DEVICES
    parallel: Parallel = Parallel.auto
    nproc: int | None = None  # processes for ddp on cpu (one per GPU otherwise)
    # local: this machine trains the stages in order; slurm: every stage not in the store is
    # one SLURM job (submitit), a child after its parent; ray: one Ray task per node of each
    # such stage, on a running Ray cluster, this command waiting for them. `nodes` > 1: each
    # stage on that many nodes (parallel=ddp|fsdp|deepspeed, nproc processes per node), under
    # a scheduler only.
    launcher: str = "local"
    nodes: int = 1
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    only: list[str] = field(default_factory=list)  # run just these stages
    force: list[str] = field(default_factory=list)  # retrain these even if cached
    fresh: bool = False  # ignore trainer checkpoints of an interrupted stage
    seed: int = 42
    # Deterministic kernels on CUDA (the Trainer's full_determinism); CPU stages repeat
    # bitwise without it. `plan` says what a stage's weights can be trusted to repeat.
    deterministic: bool = False
    output_root: str = "outputs"


@functools.cache
def register_configs() -> None:
    """The schema in Hydra's ConfigStore, once a process: storing converts every dataclass
    of it to an OmegaConf node (20 ms each compose measured), and Hydra hands each compose a
    copy of what is stored."""
    ConfigStore.instance().store(name="engine_schema", node=EngineConfig)
