"""The field-notes failures, reproduced against the INSTALLED transformers / accelerate / peft.

Each failure has two tests: the engine's path (planner + guard) that prevents it, and a twin
that runs the same setting with the guard left out and asserts the library really fails, so
the reproduction is proven real on this machine. GPUs and MPS are simulated on CPU:

- Two GPUs: `torch.cuda.is_available/device_count/set_device` are patched while
  `args.device` is resolved, so `TrainingArguments._setup_devices` itself returns `cuda:0`
  and sets `_n_gpu = torch.cuda.device_count() = 2`, exactly as on a 2-GPU box. The Trainer's
  `_move_model_to_device` is a no-op then: the model "already sits" where its
  `hf_device_map` says, and a CPU build of torch cannot move it to CUDA.
- MPS: `torch.backends.mps.is_available/is_built` are patched.
- A distributed launcher: LOCAL_RANK/RANK/WORLD_SIZE + a one-process gloo group.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
import torch
import transformers.trainer
from accelerate.state import AcceleratorState
from datasets import Dataset
from engine_cli import free_port
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
from transformers.utils import import_utils
from trl import SFTConfig, SFTTrainer

from recipe_engine.config.compose import compose_config
from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.placement import (
    GpuInfo,
    PlacementPlan,
    PlacementRefused,
    PlacementRequest,
    plan_placement,
)
from recipe_engine.plan.trainer_settings import trainer_settings
from recipe_engine.resolve.machine import Machine, detect_machine
from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.trainer import (
    GuardViolation,
    apply_guard,
    build_args,
    check_parameter_devices,
    planned_steps,
    preflight,
    verify_trainer,
)
from recipe_engine.trainers import TRAINERS

TWO_GPUS = (GpuInfo(0, "NVIDIA RTX 6000 Ada", 48.0), GpuInfo(1, "NVIDIA RTX 6000 Ada", 48.0))
ROWS = 8  # conversational rows in the tiny dataset
BATCH = 2  # per-device batch: 8 rows / 2 = 4 steps per epoch with n_gpu <= 1, 2 with n_gpu = 2
SFTTRAINER_DP_ERROR = "does not support `nn.DataParallel`"
ACCELERATE_DM_ERROR = "You can't train a model that has been loaded with `device_map='auto'`"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _restore_process_state() -> Iterator[None]:
    """accelerate writes env vars and a process-wide state; leave neither to the next test."""
    saved_env, threads = dict(os.environ), torch.get_num_threads()
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    AcceleratorState._reset_state(reset_partial_state=True)
    os.environ.clear()
    os.environ.update(saved_env)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return build_tiny_model("tiny-qwen2")


@pytest.fixture(scope="module")
def tokenizer(tiny_path: Path):
    return AutoTokenizer.from_pretrained(tiny_path)


@pytest.fixture
def bf16_model(tiny_path: Path):
    return AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def chat_rows() -> Dataset:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} + {a + 1}?"},
                {"role": "assistant", "content": str(2 * a + 1)},
            ]
        }
        for a in range(ROWS)
    ]
    return Dataset.from_list(rows)


@pytest.fixture(scope="module")
def token_rows() -> Dataset:
    """Already-tokenized rows for the plain Trainer (it has no chat formatting of its own)."""
    return Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * ROWS)


@pytest.fixture
def no_cuda_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainers built on simulated-GPU arguments: the CUDA calls a CPU torch cannot make.

    On a real GPU box the model already sits on cuda:0 (its device map); TRL's telemetry asks
    the accelerator's (cuda) device for its name.
    """
    monkeypatch.setattr(Trainer, "_move_model_to_device", lambda self, model, device: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "simulated GPU")


# --------------------------------------------------------------------------- helpers


@contextmanager
def visible_gpus(count: int) -> Iterator[None]:
    """What torch reports on a machine with `count` CUDA GPUs (no CUDA call really made)."""
    with (
        mock.patch.object(torch.cuda, "is_available", return_value=True),
        mock.patch.object(torch.cuda, "device_count", return_value=count),
        mock.patch.object(torch.cuda, "set_device"),
    ):
        yield


@contextmanager
def apple_mps() -> Iterator[None]:
    """What torch reports on Apple Silicon. transformers caches its MPS probe (lru_cache)."""
    probe = import_utils.is_torch_mps_available
    probe.cache_clear()
    try:
        with (
            mock.patch.object(torch.backends.mps, "is_available", return_value=True),
            mock.patch.object(torch.backends.mps, "is_built", return_value=True),
        ):
            assert probe()
            yield
    finally:
        probe.cache_clear()


def sft_settings(tmp_path: Path, **extra) -> dict:
    return {
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "per_device_train_batch_size": BATCH,
        "num_train_epochs": 1,
        "bf16": False,  # the model's weights are bf16; autocast is not what decides wrapping
        "dataloader_pin_memory": False,
        **extra,
    }


def two_gpu_args(tmp_path: Path, cls=SFTConfig, **extra):
    """Arguments resolved as the installed TrainingArguments resolves them with 2 GPUs."""
    with visible_gpus(2):
        args = cls(**sft_settings(tmp_path, **extra))
        device = args.device  # _setup_devices: cuda:0 and _n_gpu = torch.cuda.device_count()
    assert device == torch.device("cuda", 0)
    assert args.n_gpu == 2  # the library's own value: nothing in this test set it
    return args


def two_gpu_plan() -> PlacementPlan:
    """The engine's plan for a plain `python` process that sees two GPUs."""
    plan = plan_placement(PlacementRequest(machine_gpus=TWO_GPUS, model_gib=1.0))
    assert (plan.device, plan.mode, plan.device_map) == ("cuda", "single", {"": 0})
    assert plan.n_gpu == 1 and plan.world_size == 1
    assert any("stay idle" in w and "parallel=ddp" in w for w in plan.warnings)
    return plan


def lora() -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")


def cpu_args(tmp_path: Path, plan: PlacementPlan):
    """The engine's own SFTConfig for a CPU plan (build_args, then the guard)."""
    stage = StageConfig(train={"per_device_train_batch_size": BATCH, "num_train_epochs": 1})
    settings = trainer_settings(
        dataclasses.replace(stage, dtype="float32"), plan, seed=0, kind="causal_lm", has_eval=False
    )
    args = build_args(settings, output_dir=tmp_path / "out")
    apply_guard(args, plan)
    return args


# --------------------------------------------------------------------------- (a) bf16, {"": 0}


@pytest.mark.usefixtures("no_cuda_move")
def test_a_twin_bf16_model_on_one_gpu_gets_dataparallel_and_sfttrainer_refuses(
    tmp_path, bf16_model, token_rows, chat_rows, tokenizer
):
    """FIELD-NOTES 1 without the guard: {'': 0} on args.device with 2 GPUs -> DataParallel."""
    plan = two_gpu_plan()
    bf16_model.hf_device_map = plan.device_map  # what from_pretrained(device_map={"": 0}) sets
    args = two_gpu_args(tmp_path, cls=TrainingArguments)
    trainer = Trainer(model=bf16_model, args=args, train_dataset=token_rows)
    # transformers 5.23: a one-device map equal to args.device is NOT model parallel.
    assert trainer.is_model_parallel is False and trainer.args.n_gpu == 2
    assert isinstance(trainer._wrap_model(trainer.model, training=True), torch.nn.DataParallel)
    # The second symptom: half the steps ("0/68 instead of 0/136"), the batch is split over 2.
    steps = trainer.set_initial_training_values(args, trainer.get_train_dataloader())[-1]
    assert steps == planned_steps(args, ROWS, 1) // 2 == 2
    with pytest.raises(GuardViolation, match="n_gpu=2"):
        verify_trainer(trainer, plan, planned_steps(args, ROWS, 1))

    # TRL 1.16 moves the failure to construction time.
    sft_args = two_gpu_args(tmp_path)
    with pytest.raises(ValueError, match=SFTTRAINER_DP_ERROR):
        SFTTrainer(
            model=bf16_model, args=sft_args, train_dataset=chat_rows, processing_class=tokenizer
        )


@pytest.mark.usefixtures("no_cuda_move")
def test_a_engine_guard_keeps_bf16_model_unwrapped_with_two_gpus(
    tmp_path, bf16_model, chat_rows, tokenizer
):
    plan = two_gpu_plan()
    bf16_model.hf_device_map = plan.device_map
    args = two_gpu_args(tmp_path)
    apply_guard(args, plan)
    assert args.device == torch.device("cuda", 0) and args.n_gpu == 1
    trainer = SFTTrainer(
        model=bf16_model, args=args, train_dataset=chat_rows, processing_class=tokenizer
    )
    assert verify_trainer(trainer, plan, planned_steps(args, ROWS, plan.world_size)) == 4
    assert trainer.args.n_gpu == 1
    wrapped = trainer._wrap_model(trainer.model, training=True)
    assert not isinstance(wrapped, torch.nn.DataParallel)


def test_a_library_fact_cpu_resolved_args_hide_the_bug_for_a_gpu0_map(
    tmp_path, bf16_model, token_rows
):
    """Why the simulation patches CUDA: with args.device = cpu (FIELD-NOTES' shortcut, just
    `_n_gpu = 2` after resolving on CPU), transformers 5.23 sees {'': 0} != cpu as model
    parallel and forces n_gpu = 1 itself. The shortcut reproduces only for a model with no
    GPU device map; the guard may rely on neither path."""
    args = TrainingArguments(**sft_settings(tmp_path, use_cpu=True))
    assert args.device == torch.device("cpu")
    args._n_gpu = 2
    bf16_model.hf_device_map = {"": 0}
    trainer = Trainer(model=bf16_model, args=args, train_dataset=token_rows)
    assert trainer.is_model_parallel is True and args.n_gpu == 1

    del bf16_model.hf_device_map
    args._n_gpu = 2
    trainer = Trainer(model=bf16_model, args=args, train_dataset=token_rows)
    assert isinstance(trainer._wrap_model(trainer.model), torch.nn.DataParallel)


# --------------------------------------------------------------------------- (b) PEFT


def test_b_library_fact_parallel_flags_do_nothing_after_peft_wrapping(bf16_model):
    """FIELD-NOTES 1's dead end, in the installed versions: the flags are not stored on the
    PEFT wrapper (PEFT only forwards reads), and transformers' Trainer no longer reads them."""
    bf16_model.is_parallelizable = True
    bf16_model.model_parallel = True
    peft_model = get_peft_model(bf16_model, lora())
    assert "is_parallelizable" not in vars(peft_model)
    assert "model_parallel" not in vars(peft_model)
    assert peft_model.is_parallelizable is True  # a read is forwarded to the base model ...
    source = inspect.getsource(transformers.trainer)
    assert "is_parallelizable" not in source
    assert ".model_parallel" not in source  # ... but nothing in the Trainer asks


@pytest.mark.usefixtures("no_cuda_move")
def test_b_twin_peft_model_with_parallel_flags_still_gets_dataparallel(
    tmp_path, tiny_path, bf16_model, token_rows, chat_rows, tokenizer
):
    plan = two_gpu_plan()
    bf16_model.hf_device_map = plan.device_map
    bf16_model.is_parallelizable = True
    bf16_model.model_parallel = True
    peft_model = get_peft_model(bf16_model, lora())
    assert peft_model.hf_device_map == {"": 0}  # PEFT forwards the base model's map
    args = two_gpu_args(tmp_path, cls=TrainingArguments)
    trainer = Trainer(model=peft_model, args=args, train_dataset=token_rows)
    assert trainer.args.n_gpu == 2
    assert isinstance(trainer._wrap_model(trainer.model, training=True), torch.nn.DataParallel)

    # SFTTrainer wrapping the base model with PEFT itself (peft_config=): refused.
    base = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.bfloat16)
    base.hf_device_map = plan.device_map
    base.is_parallelizable = True
    base.model_parallel = True
    with pytest.raises(ValueError, match=SFTTRAINER_DP_ERROR):
        SFTTrainer(
            model=base,
            args=two_gpu_args(tmp_path),
            train_dataset=chat_rows,
            processing_class=tokenizer,
            peft_config=lora(),
        )


@pytest.mark.usefixtures("no_cuda_move")
def test_b_engine_guard_keeps_peft_model_unwrapped(tmp_path, bf16_model, chat_rows, tokenizer):
    plan = two_gpu_plan()
    bf16_model.hf_device_map = plan.device_map
    args = two_gpu_args(tmp_path)
    apply_guard(args, plan)
    trainer = SFTTrainer(
        model=bf16_model,
        args=args,
        train_dataset=chat_rows,
        processing_class=tokenizer,
        peft_config=lora(),
    )
    assert type(trainer.model).__name__ == "PeftModelForCausalLM"
    assert verify_trainer(trainer, plan, planned_steps(args, ROWS, 1)) == 4
    assert trainer.args.n_gpu == 1
    assert not isinstance(trainer._wrap_model(trainer.model), torch.nn.DataParallel)


# --------------------------------------------------------------------------- (c) device=cpu


@pytest.mark.parametrize("other", ["mps", "cuda"])
def test_c_explicit_cpu_wins_on_a_machine_with_mps_and_gpus(tmp_path, tiny_path, other):
    machine = Machine(
        gpus=TWO_GPUS,
        mps_available=True,
        cuda_visible_devices=None,
        world_size=1,
        rank=0,
        local_rank=0,
        launched_by="python",
    )
    recipe = plan_from_config(compose_config(["recipe=text-lora", "device=cpu"]), machine)
    plan = recipe.stages["llm"].placement
    assert (plan.device, plan.device_map, plan.use_cpu, plan.n_gpu) == ("cpu", {"": "cpu"}, True, 0)
    assert plan.visible_gpus == () and plan.cuda_visible_devices is None

    simulate = apple_mps() if other == "mps" else visible_gpus(2)
    with simulate:
        assert torch.backends.mps.is_available() or torch.cuda.is_available()
        args = cpu_args(tmp_path, plan)  # resolves args.device inside apply_guard
    assert args.use_cpu is True
    assert args.device == torch.device("cpu") and args.n_gpu == 0
    model = AutoModelForCausalLM.from_pretrained(tiny_path, device_map=plan.device_map)
    peft_model = get_peft_model(model, lora())
    check_parameter_devices(peft_model, plan)  # nothing moved off the CPU


def test_c_twin_without_use_cpu_the_trainer_auto_detects_the_other_device(tmp_path):
    with apple_mps():
        args = SFTConfig(**sft_settings(tmp_path))
        assert args.device == torch.device("mps")  # "Model loaded on ... then Device: mps"
    AcceleratorState._reset_state(reset_partial_state=True)
    args = two_gpu_args(tmp_path)
    assert args.device.type == "cuda" and args.n_gpu == 2


def test_c_configured_device_ignored_is_caught_before_step_0(tiny_path):
    """FIELD-NOTES 2: the plan says mps, the parameters sit on cpu -> stop, naming both."""
    plan = plan_placement(PlacementRequest(device="mps", mps_available=True))
    assert plan.device == "mps" and plan.device_map == {"": "mps"} and plan.use_cpu is False
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    with pytest.raises(GuardViolation, match=r"Parameters are on cpu .*places the stage on mps"):
        check_parameter_devices(model, plan)


# --------------------------------------------------------------------------- (d) launcher


def torchrun(world_size: int, **fields) -> PlacementRequest:
    return PlacementRequest(
        machine_gpus=TWO_GPUS,
        world_size=world_size,
        local_rank=0,
        launched_by="torchrun",
        **fields,
    )


def test_d_planner_never_shards_under_a_launcher():
    ddp = plan_placement(torchrun(2))
    assert ddp.mode == "ddp" and ddp.device_map == {"": 0} and ddp.starter == "external"
    rank1 = plan_placement(
        PlacementRequest(machine_gpus=TWO_GPUS, world_size=2, local_rank=1, launched_by="torchrun")
    )
    assert rank1.device_map == {"": 1}
    one = plan_placement(torchrun(1))
    assert one.mode == "single" and one.device_map == {"": 0}

    with pytest.raises(PlacementRefused, match="accelerate refuses") as refused:
        plan_placement(torchrun(2, parallel="model_parallel"))
    assert "parallel=ddp" in str(refused.value) and refused.value.key == "parallel"
    with pytest.raises(PlacementRefused, match="4bit spread over several devices"):
        plan_placement(torchrun(1, parallel="model_parallel", quantization="4bit"))
    # Too big for one GPU under a launcher: refused, not silently sharded with 'balanced'.
    with pytest.raises(PlacementRefused, match="sharded device_map cannot run under torchrun"):
        plan_placement(torchrun(1, model_gib=60.0))
    # Without the launcher the same model is sharded in one process.
    assert plan_placement(PlacementRequest(machine_gpus=TWO_GPUS, model_gib=60.0)).device_map == (
        "balanced"
    )
    ds = plan_placement(
        PlacementRequest(
            machine_gpus=TWO_GPUS,
            world_size=2,
            launched_by="deepspeed",
            parallel="deepspeed",
            deepspeed_stage=2,
        )
    )
    assert ds.device_map is None


def _launched_trainer(tmp_path: Path, model, token_rows) -> Trainer:
    """A Trainer built under torchrun's env (one gloo process): accelerate is distributed."""
    os.environ.update(
        LOCAL_RANK="0",
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        OMP_NUM_THREADS=str(torch.get_num_threads()),
        TORCHELASTIC_RUN_ID="guard-test",
    )
    args = TrainingArguments(**sft_settings(tmp_path, use_cpu=True))
    trainer = Trainer(model=model, args=args, train_dataset=token_rows)
    assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == 1
    assert trainer.accelerator.distributed_type.name == "MULTI_CPU"
    return trainer


def test_d_twin_sharded_device_map_under_launcher_is_refused_by_accelerate(
    tmp_path, bf16_model, token_rows
):
    # What device_map='auto'/'balanced' leaves on a model spread over two GPUs.
    bf16_model.hf_device_map = {"model.embed_tokens": 0, "model.layers": 0, "model.norm": 1}
    bf16_model.hf_device_map["lm_head"] = 1
    trainer = _launched_trainer(tmp_path, bf16_model, token_rows)
    with pytest.raises(ValueError, match=ACCELERATE_DM_ERROR):
        trainer.accelerator.prepare(trainer.model)  # what Trainer.train() calls first


def test_d_engine_map_passes_the_same_accelerate_check(tmp_path, bf16_model, token_rows):
    trainer_env = {"LOCAL_RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"}
    machine = detect_machine(trainer_env)
    assert machine.launched_by == "torchrun"
    plan = plan_placement(
        PlacementRequest(
            device="cpu",
            world_size=machine.world_size,
            local_rank=machine.local_rank,
            launched_by=machine.launched_by,
        )
    )
    assert plan.device_map == {"": "cpu"} and plan.starter == "external"
    bf16_model.hf_device_map = plan.device_map
    trainer = _launched_trainer(tmp_path, bf16_model, token_rows)
    assert trainer.accelerator.verify_device_map(trainer.model) is False
    prepared = trainer.accelerator.prepare(trainer.model)  # no ValueError: DDP over gloo
    assert isinstance(prepared, torch.nn.parallel.DistributedDataParallel)


# --------------------------------------------------------------------------- (e) 4-bit on MPS


def test_e_four_bit_on_mps_is_refused_by_default():
    with pytest.raises(RecipeError, match="on_unsupported") as refused:
        plan_from_config(compose_config(["recipe=r1-llm-only", "hardware=apple-silicon"]))
    assert "quantization=4bit" in str(refused.value) and "device=mps" in str(refused.value)


def test_e_four_bit_on_mps_falls_back_only_when_asked_and_records_why():
    cfg = compose_config(
        [
            "recipe=r1-llm-only",
            "hardware=apple-silicon",
            "+stage.llm.quantization.on_unsupported=skip",
        ]
    )
    stage = plan_from_config(cfg).stages["llm"]
    assert stage.placement.device == "mps"
    assert stage.policy.bits == "none" and stage.placement.quantization == "none"
    fallback = stage.placement.quantization_fallback
    assert fallback and "MPS" in fallback and "on_unsupported=skip" in fallback
    assert any("WITHOUT quantization" in w for w in stage.placement.warnings)


def test_e_library_fact_installed_bitsandbytes_declares_an_mps_backend():
    """The twin cannot show the failure: bitsandbytes 0.50 lists MPS as supported and ships
    pure-PyTorch MPS kernels, so transformers' backend check would pass on a Mac. The engine's
    refusal above is therefore its own policy, independent of the library version."""
    import bitsandbytes

    assert "mps" in bitsandbytes.supported_torch_devices
    assert importlib.util.find_spec("bitsandbytes.backends.mps.ops") is not None
    source = Path(importlib.util.find_spec("bitsandbytes.backends.mps.ops").origin).read_text()
    assert '"bitsandbytes::quantize_4bit", "mps"' in source


# --------------------------------------------------------------------------- after-the-fact


def cpu_plan() -> PlacementPlan:
    plan = plan_placement(PlacementRequest(device="cpu"))
    assert plan.device == "cpu" and plan.n_gpu == 0 and plan.world_size == 1
    return plan


@pytest.fixture
def cpu_trainer(tmp_path, tiny_path, chat_rows, tokenizer):
    plan = cpu_plan()
    model = AutoModelForCausalLM.from_pretrained(tiny_path, device_map=plan.device_map)
    trainer = SFTTrainer(
        model=model,
        args=cpu_args(tmp_path, plan),
        train_dataset=chat_rows,
        processing_class=tokenizer,
    )
    assert verify_trainer(trainer, plan, planned_steps(trainer.args, ROWS, 1)) == 4
    return trainer, plan


def test_verify_trainer_catches_n_gpu_forced_back(cpu_trainer):
    trainer, plan = cpu_trainer
    trainer.args._n_gpu = 2  # something reset it after the guard ran
    with pytest.raises(GuardViolation, match="n_gpu=2.*DataParallel"):
        verify_trainer(trainer, plan, 4)


def test_verify_trainer_catches_a_dataparallel_wrap_even_with_n_gpu_1(cpu_trainer, monkeypatch):
    """A library version that wraps on its own (n_gpu untouched) is still refused."""
    trainer, plan = cpu_trainer
    monkeypatch.setattr(
        trainer, "_wrap_model", lambda model, training=True: torch.nn.DataParallel(model)
    )
    with pytest.raises(GuardViolation, match="returned nn.DataParallel"):
        verify_trainer(trainer, plan, 4)


def test_verify_trainer_catches_a_world_size_other_than_planned(cpu_trainer):
    trainer, _ = cpu_trainer
    ddp = plan_placement(PlacementRequest(device="cpu", parallel="ddp", nproc=2))
    assert ddp.world_size == 2 and ddp.starter == "self-torchrun"
    with pytest.raises(GuardViolation, match="world size 1, the plan with 2"):
        verify_trainer(trainer, ddp, 2)


def test_verify_trainer_catches_a_step_count_other_than_planned(cpu_trainer):
    trainer, plan = cpu_trainer
    with pytest.raises(GuardViolation, match="would run 4 steps, the plan expects 8"):
        verify_trainer(trainer, plan, 8)


def test_check_parameter_devices_names_a_misplaced_parameter(tiny_path):
    plan = cpu_plan()
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_path), lora())
    check_parameter_devices(model, plan)
    norm = model.base_model.model.model.norm
    norm.weight = torch.nn.Parameter(torch.empty_like(norm.weight, device="meta"))
    with pytest.raises(GuardViolation, match=r"meta \(e\.g\. .*model\.norm\.weight\)"):
        check_parameter_devices(model, plan)


def test_the_preflight_runs_in_the_precision_training_runs_in(
    tmp_path, tiny_path, tokenizer, chat_rows
):
    """Training autocasts through accelerate's wrapper of the prepared model, which `train`
    installs; the preflight runs before it and autocasts itself. On an H100 a bf16 stage's
    preflight ran without autocast (docs/gpu/); bf16 on the CPU takes the same path here."""
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    args = SFTConfig(**sft_settings(tmp_path, bf16=True), use_cpu=True)
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=chat_rows, processing_class=tokenizer
    )
    seen = []
    linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    hook = linear.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    try:
        assert preflight(trainer, TRAINERS["sft"]) > 0
    finally:
        hook.remove()
    assert seen and all(seen)
