"""The seeds' failed GPU deployment, on CPU: one training script run under torchrun with two
gloo processes (tests/run/test_seed_failures.py launches it).

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/seed_twin.py \
        PLACEMENT MODEL_FOLDER OUT_DIR

PLACEMENT:
- `auto`: the seed's loading, `device_map="auto"` (with a memory cap, so the tiny model is
  spread over CPU and disk as a big one is over GPU and CPU), then SFTTrainer.
- `bypass`: the same after ACCELERATE_BYPASS_DEVICE_MAP=true, the seed's next step.
- `engine`: the same script with the engine's placement: the planned device map for this
  launch, the guard's checks on the loaded model and the built trainer, then one step.
"""

from __future__ import annotations

import os
import sys

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

from recipe_engine.plan.placement import plan_placement
from recipe_engine.plan.placement_request import PlacementRequest
from recipe_engine.resolve.machine import detect_machine
from recipe_engine.run.trainer import (
    apply_guard,
    check_parameter_devices,
    planned_steps,
    verify_trainer,
)

ROWS = [[{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}]] * 8


def engine_placement():  # noqa: ANN201 - a PlacementPlan
    """What `plan` decides for a stage launched like this (torchrun, 2 processes, CPU)."""
    machine = detect_machine()
    return plan_placement(
        PlacementRequest(
            device="cpu",
            parallel="ddp",
            world_size=machine.world_size,
            local_rank=machine.local_rank,
            launched_by=machine.launched_by,
        )
    )


def main(placement: str, folder: str, out: str) -> None:
    if placement == "bypass":
        os.environ["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"
    plan = engine_placement() if placement == "engine" else None
    spread = {"device_map": "auto", "max_memory": {"cpu": "300KB"}}
    where = {"device_map": plan.device_map} if plan else spread
    offload = f"{out}/offload-{os.environ['RANK']}"
    model = AutoModelForCausalLM.from_pretrained(folder, offload_folder=offload, **where)
    args = SFTConfig(
        output_dir=out,
        max_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
    )
    if plan:
        check_parameter_devices(model, plan)
        apply_guard(args, plan)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    dataset = Dataset.from_dict({"messages": ROWS})
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    if plan:
        verify_trainer(trainer, plan, planned_steps(args, len(ROWS), plan.world_size))
    trainer.train()
    print(f"rank {os.environ['RANK']}: trained {trainer.state.global_step} step(s)", flush=True)
    # Leave together: a rank that exits first tears gloo down under the other, which then
    # aborts ("terminate called without an active exception"; seen under load in `make test`).
    trainer.accelerator.wait_for_everyone()
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
