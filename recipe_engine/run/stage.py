"""One stage of a recipe, executed as its `StagePlan` says, step by step.

`StageRecipe.run` is the table of contents of a training stage; each step is one method.
Evaluation runs after the trained weights are committed, so a failing evaluation never
costs the training. The evaluation-only stage is `run/evaluation_stage.EvaluationRecipe`; both
load through `run/loading` and record `run/stage_manifest`'s fields.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from recipe_engine.capabilities.judged import trl_metrics
from recipe_engine.plan.components import report_layout
from recipe_engine.plan.policy import decide_policy
from recipe_engine.plan.recipe_plan import PolicyPlan, RecipePlan, StagePlan
from recipe_engine.plan.trainer_settings import zero_stage
from recipe_engine.resolve.inventory import model_inventory
from recipe_engine.resolve.machine import is_main_process
from recipe_engine.resolve.row_shapes import asks_question
from recipe_engine.run import evaluation, measuring, precision, preference_scores, tracking
from recipe_engine.run.capability_loads import CapabilityLoads
from recipe_engine.run.census import census, format_report, trainable_report
from recipe_engine.run.loading import (
    Weights,
    check_handoff,
    handoff_checksums,
    load_stage_model,
    load_stage_processor,
    merge_parent,
    name_adapter_base,
)
from recipe_engine.run.memory_peak import PeakMemory, free_memory, peak_memory
from recipe_engine.run.policies import Frozen, apply_freeze, apply_lora, bnb_config
from recipe_engine.run.policies import enable_gradient_checkpointing as checkpointing
from recipe_engine.run.seeding import seed_stage
from recipe_engine.run.stage_manifest import (
    manifest_versions,
    stage_identity,
    stage_platform,
    trained_parameter_names,
)
from recipe_engine.run.trainer import (
    MetricsLogger,
    TrainerParts,
    apply_guard,
    build_args,
    check_finite_weights,
    check_parameter_devices,
    check_saved_weights,
    evaluate_held_out,
    make_trainer,
    newest_finite,
    planned_steps,
    preflight,
    preflight_generation,
    verify_trainer,
    whole_models,
)
from recipe_engine.store.records import ADAPTER, FULL, Manifest, StageMetrics, precision_of
from recipe_engine.store.stage_records import (
    Census,
    Handoff,
    QuantizationFacts,
    RecordedDeterminism,
    RecordedPlacement,
    TrainableReport,
)
from recipe_engine.store.store import Store, relative_in_store
from recipe_engine.trainers import TRAINERS

log = logging.getLogger("recipe_engine")


class StageRecipe:
    """Trains one stage: load -> policies -> trainer -> guard -> train -> commit -> evaluate."""

    def __init__(
        self, plan: RecipePlan, stage: StagePlan, store: Store, *, fresh: bool, run_dir: Path
    ) -> None:
        """The recipe's whole state, in one place: what it is given, then what each step
        sets (None until that step ran; `output` and `manifest` on rank 0 only)."""
        self.plan, self.stage, self.store, self.fresh = plan, stage, store, fresh
        self.run_dir = run_dir  # this run's folder: trackers' logs outlive the work folder
        self.main_process = is_main_process()
        self.work = store.work_dir(stage.fingerprint)
        self.metrics = StageMetrics(train_samples=stage.data.train_rows)
        self.timings: dict[str, float] = {}
        self.started = time.time()
        # merge_parent
        self.weights: Weights | None = None
        # load
        self.policy: PolicyPlan = stage.policy
        self.model: Any = None
        self.processor: Any = None
        self.handoff = Handoff()
        # apply_policies
        self.report: TrainableReport = {}  # trainable parameters by component
        self.census: Census = {}
        # build_trainer
        self.args: Any = None
        self.metrics_log: MetricsLogger | None = None
        self.trainer: Any = None
        # commit
        self.trained: Any = None  # the trained model rank 0 records and scores
        self.manifest: Manifest | None = None
        self.output: Path | None = None

    def run(self) -> Manifest | None:
        """The stage, top to bottom. Returns the manifest (rank 0) or None (other ranks)."""
        self.prepare_work_dir()
        self.merge_parent()
        self.load()
        self.apply_policies()
        self.build_trainer()
        self.guard_and_preflight()
        self.train()
        self.commit()
        self.evaluate()
        manifest = self.record()
        self.release()
        return manifest

    def prepare_work_dir(self) -> None:
        if self.fresh and self.work.exists() and self.main_process:
            shutil.rmtree(self.work)  # start fresh really means fresh: no checkpoint is used
        self.store.make_work_dir(self.stage.fingerprint)

    def merge_parent(self) -> None:
        """An adapter the stage starts from merged into its base (and verified), or the planned
        weights as they are (run/loading.merge_parent)."""
        started = time.time()
        self.weights = merge_parent(self.plan, self.stage, self.store)
        self.timings["merge_s"] = time.time() - started

    def load(self) -> None:
        """The planned weights, quantized on load as planned; a parent's training checked."""
        log.info("stage %s: loading %s", self.stage.name, self.weights.location)
        self.policy = self._complete_policy()
        quant = self.policy.quantization
        started = time.time()
        seed_stage(self.stage)  # weights the checkpoint lacks are initialised on load
        self.model = load_stage_model(
            self.stage, self.weights, bnb_config(quant) if quant else None
        )
        self.processor = load_stage_processor(self.stage, self.weights)
        self.timings["load_s"] = time.time() - started
        counts = None
        if self.weights.parent is not None:
            expected = self.weights.expected or {}
            counts = check_handoff(self.model, expected, self.weights.parent)
            log.info("stage %s: handoff verified %s", self.stage.name, counts)
        # with the adapter parent's merge, as verified
        self.handoff = Handoff(counts, self.weights.merge_check)

    def apply_policies(self) -> None:
        """Freeze, LoRA, gradient checkpointing; then every parameter where the plan put it."""
        policy, layout = self.policy, self.policy.layout
        assert layout is not None, "a deferred policy is decided on the loaded model first"
        seed_stage(self.stage)  # LoRA's initialisation, whatever loading drew before it
        frozen, patterns = policy.frozen, policy.freeze_patterns
        apply_freeze(self.model, layout=layout, components=frozen, patterns=patterns)
        if policy.lora is not None:
            self.model = apply_lora(
                self.model,
                policy.lora,
                Frozen(layout, frozen, patterns),
                gradient_checkpointing=policy.gradient_checkpointing,
            )
        elif policy.gradient_checkpointing:
            checkpointing(self.model)
        precision.hold(self.model, self.stage.precision)
        groups = report_layout(layout, patterns)
        self.report = trainable_report(self.model, layout=groups)
        self.census = census(self.model, layout=groups)
        table = format_report(self.report, self.census)
        log.info("stage %s: trainable parameters and census\n%s", self.stage.name, table)
        placement = self.stage.placement
        if placement.mode == "single" or placement.device == "cpu":
            check_parameter_devices(self.model, placement)

    def build_trainer(self) -> None:
        """The stage's TRL trainer (`stage.<name>.trainer`) with its planned settings."""
        kind, name = TRAINERS[self.stage.config.trainer], self.stage.name
        started = time.time()
        settings = tracking.with_run_name(self.stage.trainer, self.plan.recipe, name)
        checkpoints = self.store.checkpoints(self.stage.fingerprint)
        self.args = build_args(settings, output_dir=checkpoints, kind=kind)
        apply_guard(self.args, self.stage.placement)
        self.metrics_log = MetricsLogger(self.work / "metrics.jsonl", name)
        events = tracking.tensorboard_dir(self.run_dir, name, self.stage.config.train)
        parts = TrainerParts(
            self.model, self.args, self.stage.data.splits(), self.processor, [self.metrics_log]
        )
        parts = self._loads().into(parts)
        with tracking.tensorboard_logging_dir(events):
            self.trainer = make_trainer(kind, parts)
        # TRL's constructor casts a k-bit model's trainable weights to bfloat16, whatever the
        # stage's dtype: back to the planned ones (float32 weights under bf16 autocast had a
        # vision tower's conv meet a bf16 weight with float32 inputs, seen on an H100).
        precision.hold(self.trainer.model, self.stage.precision)
        self.timings["trainer_s"] = time.time() - started

    def guard_and_preflight(self) -> None:
        """The built trainer against the plan (n_gpu, wrapping, world size, steps), then one
        forward/backward on a real batch: both before step 0."""
        placement = self.stage.placement
        kind = TRAINERS[self.stage.config.trainer]
        rows = self.stage.data.train_rows
        expected = planned_steps(self.args, rows, placement.world_size, kind)
        self.metrics.planned_steps = verify_trainer(self.trainer, placement, expected, kind)
        precision.check(self.trainer.model, self.stage.precision, self.stage.name)
        if self.sharded:  # ZeRO-3 / FSDP shard the weights as training starts: none to run yet
            log.info("stage %s: no preflight batch (%s shards in train)", *self._sharding)
            return
        started = time.time()
        self.metrics.preflight_loss = preflight(self.trainer, TRAINERS[self.stage.config.trainer])
        self._preflight_generation()
        self.timings["preflight_s"] = time.time() - started

    def train(self) -> None:
        """Train, resuming from the latest complete checkpoint of an interrupted attempt."""
        resume = None
        if not self.fresh:
            checkpoints = self.store.complete_checkpoints(self.stage.fingerprint)
            resume = newest_finite(checkpoints, self.stage.name)
        if resume:
            log.info("stage %s: resuming from %s", self.stage.name, resume)
        if self.main_process:  # drop what an interrupted attempt logged past its checkpoint
            self.metrics_log.resume_from(int(resume.name.split("-")[-1]) if resume else 0)
        started = time.time()
        with peak_memory(self.stage.placement.device, self.trainer) as peak:
            self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        self.timings["train_s"] = time.time() - started
        self._record_memory(peak)
        self.metrics.steps = self.trainer.state.global_step
        self.metrics.train_losses = self.metrics_log.losses()

    def _record_memory(self, peak: PeakMemory) -> None:
        estimate = self.stage.memory
        self.metrics.estimated_peak_gib = round(estimate.estimate.peak, 4) if estimate else None
        self.metrics.measured_peak_gib = round(peak.peak_gib, 4)
        self.metrics.memory_measure = peak.method
        self.timings["memory_tracking_s"] = round(peak.tracking_s, 3)
        if estimate and self.main_process:  # the plan's breakdown beside what training used
            measured = f"{peak.peak_gib * 1024:.1f} MiB ({peak.method})"
            log.info("stage %s: memory planned %s; measured %s", self.stage.name,
                     estimate.describe(), measured)  # fmt: skip

    def commit(self) -> None:
        """Weights, processor and manifest into the store, atomically, by rank 0 alone."""
        if not self.sharded:  # a rank holds only its shard: the saved weights are checked
            check_finite_weights(self.stage.name, self.trainer.model)
        started = time.time()
        final = self.work / "final"
        if self.main_process:
            shutil.rmtree(final, ignore_errors=True)
        # Every rank takes part (ZeRO-3 gathers the shards); the main process writes.
        self.trainer.save_model(str(final))
        if self.main_process:
            self.trained = self._trained_model(final)
            if self.policy.lora is not None:  # PEFT named the base by its absolute path
                name_adapter_base(final, self._base_location(), self.stage.init.revision)
            self.processor.save_pretrained(str(final))
            self.manifest = self._manifest()
            self.manifest.save(final)
            shutil.copy(self.work / "metrics.jsonl", final / "metrics.jsonl")
            self.output = self.store.commit(self.stage.fingerprint, final)
            shutil.rmtree(self.work, ignore_errors=True)  # checkpoints are not needed now
            self.metrics_log.path = self.output / "metrics.jsonl"  # evaluation logs go on
            log.info("stage %s: committed %s", self.stage.name, self.output)
        self.trainer.accelerator.wait_for_everyone()
        self.timings["commit_s"] = time.time() - started

    def evaluate(self) -> None:
        """Held-out loss and exact match. The weights are committed already: a failure here is
        recorded (manifest, summary, exit code 1), never a reason to lose the training."""
        try:
            self._evaluate()
        except Exception as error:  # any library error: the stage stays committed
            text = str(error).strip().splitlines()
            self.metrics.evaluation_error = f"{type(error).__name__}: {text[0] if text else ''}"
            log.error("stage %s: evaluation failed: %s", self.stage.name, error, exc_info=True)

    def _evaluate(self) -> None:
        """Held-out loss (every rank takes part) and exact match (rank 0 generates)."""
        settings, splits = self.plan.config.eval, self.stage.data.splits()
        if splits.eval is None or not settings.enabled:
            return
        started = time.time()
        held_out = evaluation.capped(splits.eval, settings.max_samples)
        evaluated = evaluate_held_out(self.trainer, TRAINERS[self.stage.config.trainer], held_out)
        self.metrics.eval_loss = evaluated.get("eval_loss")
        self.metrics.preference = trl_metrics(evaluated) or None
        self.metrics.eval_samples = len(held_out)
        # Exact match, where the rows ask something (language-modeling text asks nothing: its
        # held-out loss is its evaluation); alone: ZeRO-3 would sync generation with the ranks.
        if self.main_process and len(held_out) and asks_question(held_out[0]):
            with whole_models(self.args), self._forwards():
                self._score_on_main_process(held_out)
        self.timings["eval_s"] = time.time() - started

    def _score_on_main_process(self, held_out: Any) -> None:
        """Exact match of the trained stage and, for a root stage, of the untrained base: each
        model's one pass for the run (`run.measuring`, recorded for its comparison) where the
        run compares, the stage's own scores read from the same answers. A stage of several
        processes leaves the pass to the run's compare, a process of its own: the trainer that
        measures a held-out loss, built on rank 0 alone, would wait on the other ranks."""
        alone = self.stage.placement.world_size == 1
        compares = self.plan.config.eval.compare and alone
        asks = measuring.run_asks(self.plan) if compares else None
        bits = self.policy.bits
        self.metrics.eval_accuracy, self.metrics.eval_contains = self._scores(
            self.trained, held_out, asks, self.stage.name, precision_of(bits)
        )
        if self.stage.parent is None:  # the untrained base, on the same rows
            base = load_stage_model(self.stage, self.weights, None)
            name = measuring.base_name_of(list(self.plan.stages))
            scores = self._scores(base, held_out, asks, name, precision_of("none"))
            self.metrics.base_accuracy, self.metrics.base_contains = scores

    def record(self) -> Manifest | None:
        """The committed manifest, completed with the evaluation and the total time."""
        if self.main_process:
            self.manifest.metrics = self.metrics
            self.manifest.timings = {**self.timings, "total_s": time.time() - self.started}
            self.manifest.save(self.output)
        # Every rank leaves the stage together: a rank that exits while rank 0 still
        # generates tears the process group down under it (SIGABRT in gloo).
        self.trainer.accelerator.wait_for_everyone()
        return self.manifest if self.main_process else None

    def release(self) -> None:
        """The stage's models, trainer and optimizer state freed before the next stage loads.
        The trainer's reference cycles would keep them alive until a full collection, which a
        few large tensors rarely trigger: the vision stage of r3 at Qwen2-VL-2B's size (4.1 GiB)
        lived on through the llm stage's training."""
        self.model = self.trainer = self.trained = self.metrics_log = None
        free_memory()

    # ----------------------------------------------------------------------- helpers

    def _preflight_generation(self) -> None:
        """One answer generated before step 0, on a held-out row (else a training row), in the
        context every forward of the engine's own runs in (`run.precision.forwards`); none
        for rows that ask nothing (language-modeling text), which nothing generates from."""
        splits = self.stage.data.splits()
        row = (splits.eval if splits.eval is not None and len(splits.eval) else splits.train)[0]
        if not asks_question(row):
            return
        preflight_generation(self.trainer, self.processor, row, self._forwards())

    def _forwards(self) -> Any:
        """The context the engine's own forwards run in (`run.precision.forwards`)."""
        return precision.forwards(self.stage.precision, self.stage.placement.device)

    @property
    def sharded(self) -> bool:
        """Whether each rank holds only a shard of the weights while training (ZeRO-3, FSDP).
        Before `train` an FSDP model is still unwrapped on the CPU (the Trainer places it
        when it wraps it), so a batch on the GPU cannot run through it yet."""
        placement = self.stage.placement
        config = self.stage.trainer.get("deepspeed")
        zero3 = placement.mode == "deepspeed" and zero_stage(config) == 3
        return zero3 or placement.mode == "fsdp"

    @property
    def _sharding(self) -> tuple[str, str]:
        return self.stage.name, "FSDP" if self.stage.placement.mode == "fsdp" else "ZeRO-3"

    def _trained_model(self, final: Path) -> Any:
        """The trained model rank 0 records and scores: the trainer's, or, when the ranks
        hold shards of it, the saved stage loaded back (rank 0 alone cannot gather shards,
        and loading what was saved shows the commit holds the training)."""
        if not self.sharded:
            return self.trainer.model
        check_saved_weights(self.stage.name, final)
        with whole_models(self.args):
            if self.policy.lora is None:
                return load_stage_model(self.stage, Weights(str(final)), None)
            from peft import PeftModel

            quant = self.policy.quantization
            base = load_stage_model(self.stage, self.weights, bnb_config(quant) if quant else None)
            return PeftModel.from_pretrained(base, str(final))

    def _loads(self) -> CapabilityLoads:
        return CapabilityLoads(
            self.plan, self.stage, self.weights, self.store, self.policy.quantization
        )

    def _complete_policy(self) -> PolicyPlan:
        """The planned policy; one deferred because the model's config was unreachable at
        plan time (a hub model offline) is decided now by the same planner, on its config."""
        if not self.stage.policy.deferred:
            return self.stage.policy
        inventory = model_inventory(self.stage.model)
        return decide_policy(self.stage.name, self.stage.config, self.stage.model, inventory)

    def _base_location(self) -> str:
        """What the stage loaded, as records name it: a store folder relative to the store."""
        return relative_in_store(self.weights.location, self.store)

    def _scores(
        self, model: Any, rows: Any, asks: measuring.RunAsks | None, name: str, measured_on: str
    ) -> tuple[float, float]:
        """(exact match, contains) on the held-out `rows` (of unpaired feedback, the desirable
        ones); for a preference stage the trained model's greedy answers judged too. With
        `asks`, the model's pass for the run first (recorded as `name`), whose answers serve
        where `rows` are what it asked; a stage on other rows than those asks them as well."""
        answers = None
        generation = evaluation.generation_settings(self.plan.config.eval, self.plan.config.seed)
        if asks is not None:
            loss = asks.loss(self.stage) if model is self.trained else asks.loss(asks.root)
            measured = measuring.measure_model(
                model, self.processor, asks.questions, loss, measured_on
            )
            measuring.write_measurement(self.run_dir, name, measured)
            answers = measuring.answers_to(rows, measured, asks.questions.asked)
        if answers is None:
            answers = evaluation.generate_answers(model, self.processor, rows, generation)
        result = evaluation.score_answers(answers, rows)
        if self.metrics.preference is not None and model is self.trained:
            self.metrics.preference |= preference_scores.greedy_metrics(answers, rows)
        return result.accuracy, result.contains

    def _manifest(self) -> Manifest:
        stage, policy = self.stage, self.policy
        trained = trained_parameter_names(self.model)
        here = stage_platform(stage)
        return Manifest(
            **asdict(stage_identity(self.plan, stage)),
            format=ADAPTER if policy.lora is not None else FULL,
            model_entry=asdict(self.stage.model),
            dtype=stage.dtype,
            base_location=self._base_location(),
            architecture=policy.layout.name if policy.layout else None,
            config=asdict(stage.config),
            trainer=dict(stage.trainer),
            data=asdict(stage.data.config),
            placement=RecordedPlacement(**asdict(stage.placement)),
            quantization=QuantizationFacts(
                bits=policy.bits,
                settings=stage.config.quantization,
                fallback=stage.placement.quantization_fallback,
            ),
            trained_components=policy.trained_components,
            frozen_components=policy.frozen,
            lora_components=policy.lora.components if policy.lora else [],
            trainable_report=self.report,
            census=self.census,
            trained_parameters=trained,
            trained_checksums={} if policy.lora else handoff_checksums(self.trained, trained),
            handoff=self.handoff,
            metrics=self.metrics,
            eval_settings=asdict(self.plan.config.eval),
            world_size=self.args.world_size,
            determinism=RecordedDeterminism(**asdict(stage.determinism)),
            platform=here,
            versions=manifest_versions(here),
        )
