"""Build SFTConfig + SFTTrainer for a stage, apply the placement guard, preflight, train.

The guard is the engine's reason to exist (FIELD-NOTES.md, section 1): a single process
must never let the Trainer wrap the model in nn.DataParallel. `args._n_gpu` is fixed after
`args.device` has been resolved (which sets it) and before the trainer is built, then the
built trainer is checked: n_gpu, what `_wrap_model` would return, world size, step count.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from recipe_engine.config import library_objects
from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.errors import RecipeError, StageFailed
from recipe_engine.files import JsonObject
from recipe_engine.plan.placement import PlacementPlan
from recipe_engine.run.evaluation import answer_batch
from recipe_engine.store.scores import Generation
from recipe_engine.trainers import DEFAULT
from recipe_engine.trainers.kind import TrainerKind

# The preflight's generation: one new token after the prompt runs every forward generation runs
# (the prompt's, then a cached step's would repeat it); two, to take the cached path too.
PREFLIGHT_GENERATION = Generation(max_new_tokens=2, batch_size=1)

log = logging.getLogger("recipe_engine")


class NonFiniteTraining(StageFailed):
    """The loss, a gradient or a trained weight became NaN or infinite."""


class GuardViolation(RuntimeError):
    """What the plan promised does not hold; raised before step 0."""


class PreflightError(StageFailed):
    """The one-batch forward/backward failed: a dtype or device mismatch, named clearly."""


def build_args(settings: LibraryKwargs, *, output_dir: Path, kind: TrainerKind = DEFAULT) -> Any:
    """The planned settings object (SFTConfig, DPOConfig ...: `StagePlan.trainer`) writing its
    checkpoints to `output_dir`."""
    if (settings.get("accelerator_config") or {}).get("use_configured_state"):
        cpu_deepspeed_state(settings)
    try:
        return library_objects.trainer_config(kind.settings_class, settings, output_dir)
    except (ValueError, TypeError) as error:
        raise RecipeError(
            f"The trainer settings were rejected by {kind.settings_class}: "
            f"{str(error).splitlines()[0]} Fix the matching stage.<name>.train key.",
        ) from None


@dataclass
class TrainerParts:
    """What a stage hands its TRL trainer; `added` what its kind's capabilities loaded, by the
    trainer's argument names (a frozen reference, a teacher, reward functions); `adapter_reference`
    whether its reference is the policy with its adapter disabled (checked once built)."""

    model: Any
    args: Any
    splits: Any  # DataSplits: train and eval datasets
    processor: Any
    callbacks: list[Any]
    added: dict[str, Any] = field(default_factory=dict)
    adapter_reference: bool = False


def make_trainer(kind: TrainerKind, parts: TrainerParts) -> Any:
    """TRL's trainer for `kind` built from the parts, with what its capabilities added."""
    import importlib

    trainer_class = getattr(importlib.import_module(kind.module), kind.trainer_class)
    if getattr(parts.args, "deepspeed", None):
        fresh_accelerator_state()
    trainer = trainer_class(
        model=parts.model,
        args=parts.args,
        train_dataset=parts.splits.train,
        eval_dataset=parts.splits.eval,
        processing_class=parts.processor,
        callbacks=parts.callbacks,
        **parts.added,
    )
    if parts.adapter_reference:
        reference_is_the_disabled_adapter(trainer.model)
    return trainer


def fresh_accelerator_state() -> None:
    """Each stage's Trainer builds its own Accelerator with the stage's DeepSpeed plugin, but
    accelerate keeps the first Accelerator's state for the whole process and refuses a second
    plugin ("You cannot pass in a `deepspeed_plugin` when creating a second `Accelerator`"):
    a run's second DeepSpeed stage failed as it was built. The state is cleared before each
    stage's Trainer; the process group (accelerate's PartialState) stays."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def evaluate_held_out(trainer: Any, kind: TrainerKind, held_out: Any) -> dict[str, float]:
    """The trainer's own evaluation of the held-out rows (loss; rewards for preference)."""
    # transformers' MLflowCallback ended the stage's MLflow run when training ended; what the
    # evaluation logs through it would open a run of its own (a random name, no tags) beside
    # the stage's. The engine records the evaluation on the stage's run itself (`stage/*`).
    from transformers.integrations import MLflowCallback

    trainer.remove_callback(MLflowCallback)
    return kind.evaluate(trainer, held_out)


def reference_is_the_disabled_adapter(model: Any) -> None:
    """Given a PEFT model, TRL's DPOTrainer and KTOTrainer copy its adapter as a "ref" adapter
    (they cannot tell a fresh adapter from a pretrained one) and score the reference with it.
    The engine's adapters are fresh: with LoRA's default initialisation (B = 0,
    modules_to_save copies of the originals) the copy computes what the adapter-disabled base
    computes, which TRL uses when there is no "ref" adapter. Dropped, no second copy of the
    adapter and of the fully trained modules sits in memory, and none is saved with the stage.
    Other initialisations (PiSSA, Gaussian ...) differ from the base at step 0, so their copy
    stays."""
    configs = getattr(model, "peft_config", None)
    if not configs or "ref" not in configs:
        return
    if configs["default"].init_lora_weights is True:
        model.delete_adapter("ref")


def cpu_deepspeed_state(settings: LibraryKwargs) -> None:
    """The process group a DeepSpeed stage on CPU trains in, made before the Trainer's.

    accelerate starts DeepSpeed only for a state made without `cpu=True`, and on a machine
    without a GPU it then picks no backend and counts one process (its `PartialState`: "no
    backend == no distributed training"), so DeepSpeed's batch check fails against its own
    world size. Made here with the planned gloo backend, the state knows every rank, and
    `accelerator_config.use_configured_state` has the Trainer use it. DS_ACCELERATOR=cpu is
    DeepSpeed's documented switch to its CPU accelerator; it must be set before DeepSpeed
    starts."""
    from datetime import timedelta

    from accelerate import PartialState

    os.environ["DS_ACCELERATOR"] = "cpu"
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    timeout = timedelta(seconds=settings.get("ddp_timeout", 1800))
    PartialState(cpu=False, backend=settings["ddp_backend"], timeout=timeout)


def apply_guard(args: Any, placement: PlacementPlan) -> None:
    """Pin the process to the planned device count before the trainer exists."""
    _ = args.device  # resolves the device, which also sets args._n_gpu
    args._n_gpu = placement.n_gpu if placement.device == "cuda" else 0


def planned_steps(args: Any, samples: int, world_size: int, kind: TrainerKind = DEFAULT) -> int:
    """ceil(batches / accumulation) per epoch (the kind counts its batches: rows, or an online
    kind's completions), or max_steps."""
    if args.max_steps > 0:
        return args.max_steps
    batches = kind.batches_per_epoch(args, samples, world_size)
    per_epoch = max(math.ceil(batches / args.gradient_accumulation_steps), 1)
    return math.ceil(args.num_train_epochs * per_epoch)


def verify_trainer(
    trainer: Any, placement: PlacementPlan, expected_steps: int, kind: TrainerKind = DEFAULT
) -> int:
    """Check the built trainer against the plan; return the step count it will run."""
    args = trainer.args
    if args.n_gpu > 1:
        raise GuardViolation(
            f"The trainer sees n_gpu={args.n_gpu} in one process and would wrap the model in "
            "nn.DataParallel (FIELD-NOTES.md, section 1). The guard forces n_gpu=1."
        )
    wrapped = trainer._wrap_model(trainer.model, training=True)
    if isinstance(wrapped, torch.nn.DataParallel):
        raise GuardViolation("Trainer._wrap_model returned nn.DataParallel; refusing to train.")
    if args.world_size != placement.world_size:
        raise GuardViolation(
            f"The trainer runs with world size {args.world_size}, the plan with "
            f"{placement.world_size}. Launch with the planned number of processes."
        )
    if getattr(args, "packing", False):
        # Packed rows are counted once TRL has tokenized and packed them: the plan, which
        # reads no tokenizer, cannot count them.
        expected_steps = planned_steps(args, len(trainer.train_dataset), placement.world_size, kind)
    steps = trainer.set_initial_training_values(args, trainer.get_train_dataloader())[-1]
    if steps != expected_steps:
        raise GuardViolation(
            f"The trainer would run {steps} steps, the plan expects {expected_steps} "
            "(ceil(samples / (batch x accumulation x world size)) x epochs)."
        )
    return steps


def check_parameter_devices(model: Any, placement: PlacementPlan) -> None:
    """After loading and PEFT wrapping, every parameter sits on the planned device type."""
    expected = placement.device
    target = placement.device_map.get("") if isinstance(placement.device_map, dict) else None
    if placement.device == "cuda" and isinstance(target, int):
        expected = f"cuda:{target}"  # a DDP rank must sit on its own GPU, not on cuda:0
    wrong = {}
    for name, param in model.named_parameters():
        where = str(param.device) if ":" in expected else param.device.type
        if where != expected:
            wrong.setdefault(str(param.device), name)
    if wrong:
        where = ", ".join(f"{dev} (e.g. {name})" for dev, name in wrong.items())
        raise GuardViolation(
            f"Parameters are on {where}, but the plan places the stage on {expected}. "
            "Something moved the model after loading; the stage stops before step 0."
        )


def preflight(trainer: Any, kind: TrainerKind) -> float:
    """One forward/backward on a real batch, as the kind's training step runs it; turns
    dtype/device errors into a clear message."""
    model = trainer.model
    batch = next(iter(trainer.get_train_dataloader()))
    # In train mode, as `training_step` runs it: a model fresh from `from_pretrained` is in
    # eval mode, where bitsandbytes repacks 4-bit weights for CPU inference in place on a
    # no-grad forward (DPO's reference pass), and training then fails in that layout; an
    # online trainer generates its training batch here, as training will. The random stream is
    # forked so that dropout and sampling here draw nothing training would have drawn.
    model.train()
    # The Trainer sets this per step inside its loop; an online trainer's loss reads it (it
    # scales by the steps a generation batch spans), and the preflight runs before the loop.
    if not hasattr(trainer, "current_gradient_accumulation_steps"):
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    with torch.random.fork_rng():
        loss = _preflight_step(trainer, kind, model, trainer._prepare_inputs(batch))
    for logged in getattr(trainer, "_metrics", {}).values():  # TRL's per-step metrics: the
        logged.clear()  # preflight batch is no training step
    return loss


def _preflight_step(trainer: Any, kind: TrainerKind, model: Any, batch: Any) -> float:
    try:
        # Training autocasts through accelerate's wrapper of the prepared model's forward,
        # which `train` installs; the preflight runs before it, so it autocasts the same way
        # itself (a no-op without mixed precision). Without it a bf16 stage on a GPU was
        # checked in a precision it never trains in (seen on an H100, docs/gpu/).
        with trainer.compute_loss_context_manager(), trainer.accelerator.autocast():
            loss = kind.preflight_step(trainer, model, batch)
    except RuntimeError as error:
        text = str(error).splitlines()[0]
        cause = (
            "a dtype mismatch between activations and weights"
            if "dtype" in text
            else "tensors on different devices"
            if "same device" in text or "on device" in text
            else "a runtime error"
        )
        raise PreflightError(
            f"The preflight forward/backward failed before step 0 with {cause}: {text}. "
            "See the dtype/device census in the stage log."
        ) from error
    finally:
        model.zero_grad(set_to_none=True)
    if not torch.isfinite(loss):
        raise PreflightError(f"The preflight loss is {loss.item()}: check the data and dtype.")
    return float(loss.item())


def preflight_generation(trainer: Any, processor: Any, row: Any, forwards: Any) -> None:
    """One answer generated from `row`'s prompt before step 0, as evaluation will generate it
    (in the `forwards` context the engine's own forwards run in): the preflight's promise
    covers the forwards after training too, where a bfloat16 QLoRA stage once met a dtype its
    training never did (FIELD-NOTES.md, section 10). In train mode, as the preflight batch ran:
    in eval mode bitsandbytes would repack the 4-bit weights for CPU inference in place. The
    random stream is forked: dropout here draws nothing training would have drawn."""
    model = trainer.model
    model.train()
    try:
        with torch.random.fork_rng(), forwards, torch.no_grad():
            answer_batch(model, processor, [row], PREFLIGHT_GENERATION)
    except RuntimeError as error:
        text = str(error).splitlines()[0]
        cause = "a dtype mismatch" if "dtype" in text else "a runtime error"
        raise PreflightError(
            f"Generating an answer failed before step 0 with {cause}: {text}. Evaluation "
            "generates the same way after training; see the dtype census in the stage log."
        ) from error


class MetricsLogger(TrainerCallback):
    """Writes every Trainer log record as one JSON line (step, loss, learning rate, ...), and
    stops the stage at the first non-finite loss or gradient norm it sees."""

    def __init__(self, path: Path, stage: str) -> None:
        self.path = path
        self.stage = stage
        self.records: list[JsonObject] = []  # the Trainer's log records, as written

    def resume_from(self, step: int) -> None:
        """Keep what was logged up to the checkpoint; the resumed run logs the rest again."""
        kept = []
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by the interruption
                    continue
                if record.get("step", 0) <= step:
                    kept.append(record)
        self.records = kept
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "epoch": state.epoch, "time": time.time(), **logs}
        self.records.append(record)
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        _stop_if_not_finite(self.stage, record, args.learning_rate)

    def losses(self) -> list[float]:
        return [r["loss"] for r in self.records if "loss" in r]


def _stop_if_not_finite(stage: str, record: JsonObject, learning_rate: float) -> None:
    for key in ("loss", "grad_norm"):
        value = record.get(key)
        if isinstance(value, int | float) and not math.isfinite(value):
            raise NonFiniteTraining(
                f"Stage `{stage}` stopped at step {record['step']}: the {key.replace('_', ' ')} "
                f"is {value}. Likely causes: a learning rate too high for this model "
                f"(stage.{stage}.train.learning_rate is {learning_rate:g}), float16 overflow "
                f"(try stage.{stage}.dtype=bfloat16 or float32), or broken rows in the data. "
                "Nothing was committed; fix it and run again (fresh=true starts over)."
            )


def check_finite_weights(stage: str, model: Any) -> None:
    """A stage whose trained weights are not all finite is never committed."""
    broken = [n for n, p in model.named_parameters() if p.requires_grad and not p.isfinite().all()]
    if broken:
        raise NonFiniteTraining(
            f"Stage `{stage}` trained {len(broken)} tensor(s) into NaN or infinity (e.g. "
            f"{broken[0]}), so it is not committed. Lower stage.{stage}.train.learning_rate "
            "or check the data, then run again with fresh=true."
        )


@contextmanager
def whole_models(args: Any) -> Iterator[None]:
    """Models loaded inside load whole, in this process alone. Under ZeRO-3, transformers
    loads every model into `deepspeed.zero.Init`, which shards it across the ranks and so
    waits for all of them: rank 0 loading alone (to score a stage) would wait forever."""
    from transformers.integrations.deepspeed import (
        set_hf_deepspeed_config,
        unset_hf_deepspeed_config,
    )

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if getattr(args, "hf_deepspeed_config", None) is not None:
            set_hf_deepspeed_config(args.hf_deepspeed_config)


def check_saved_weights(stage: str, folder: Path) -> None:
    """`check_finite_weights` for weights the ranks held in shards: read where they were
    saved (gathered), before the stage is committed."""
    if not any(folder.glob("*.safetensors")):
        raise StageFailed(
            f"Stage `{stage}` saved no weights to {folder}, so it is not committed. With "
            "ZeRO-3, keep zero_optimization.stage3_gather_16bit_weights_on_model_save=true "
            f"in stage.{stage}.train.deepspeed."
        )
    if not checkpoint_is_finite(folder):
        raise NonFiniteTraining(
            f"Stage `{stage}` trained weights into NaN or infinity, so it is not committed. "
            f"Lower stage.{stage}.train.learning_rate or check the data, then run again with "
            "fresh=true."
        )


def checkpoint_is_finite(checkpoint: Path) -> bool:
    """Every tensor of a trainer checkpoint's weights is finite (read tensor by tensor)."""
    from safetensors import safe_open

    for weights in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(weights), framework="pt") as tensors:
            for name in tensors.keys():  # noqa: SIM118 - safe_open is not a mapping
                tensor = tensors.get_tensor(name)
                if tensor.is_floating_point() and not tensor.isfinite().all():
                    return False
    return True


def newest_finite(checkpoints: Iterable[Path], stage: str) -> Path | None:
    """The newest of a stage's complete `checkpoints` (newest first) whose weights are all
    finite, to resume from: one written after training diverged would carry the NaN on."""
    for checkpoint in checkpoints:
        if checkpoint_is_finite(checkpoint):
            return checkpoint
        log.warning("stage %s: not resuming from %s: its weights hold NaN or infinity",
                    stage, checkpoint)  # fmt: skip
    return None
