"""Faults: SIGKILL the engine at chosen points, rerun the same command, check that it recovers.

Each run of the engine is its own process, forked from the suite's engine that imported
everything once (tests/forked_engine.py): the child runs PRELUDE, which arms one fault, then
the CLI, and exits with its exit code; the fault kills the child with SIGKILL at its point.
Every child starts from the freshly imported state, never from an earlier run's. All fault
injection lives here, none in the engine. One chain of runs on one output root (r3-two-stage,
4 steps per stage, a checkpoint every 2 steps):

  1. vision, mid-step: killed inside step 3 (after forward/backward, before the optimizer step).
  2. rerun: vision resumes from checkpoint-2; killed in Store.commit after the rename into
     store/<key>/ and before the COMPLETE marker.
  3. rerun: the unmarked folder is not used; vision resumes from checkpoint-4 and commits;
     killed between stages (after vision is committed, before llm starts).
  4. rerun: vision cached; llm killed mid-step 3.
  5. rerun with fresh=true: llm starts over (no resume); killed while writing checkpoint-4
     (weights written, optimizer.pt half written, no trainer_state.json).
  6. rerun: llm resumes from checkpoint-2, not the half-written checkpoint-4; killed in the final
     save (after trainer.save_model into <partial>/final, before the manifest and the commit).
  7. rerun: llm resumes from checkpoint-4, commits; exit 0; outputs load.

The module fixture runs the chain and records what each run left; the tests read the record,
so one failing property does not hide the others.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from engine_cli import forked_engine

ROOT = Path(__file__).resolve().parents[2]
KILLED = -signal.SIGKILL
RUN_TIMEOUT_S = 300  # a run that hangs is killed and the fixture raises TimeoutExpired

PRELUDE = '''
"""Arm one fault, named by FAULT / FAULT_STAGE / FAULT_STEP, in this forked engine run before
the CLI starts (tests/forked_engine.py runs this file first), and audit every weights folder
the run loads into FAULT_AUDIT."""
import json
import os
import pathlib
import signal
import sys

from transformers import Trainer

import recipe_engine.run.loading as loading
import recipe_engine.run.recipe as runner
import recipe_engine.run.stage as execution

FAULT = os.environ.get("FAULT", "")
STAGE = os.environ.get("FAULT_STAGE", "")
STEP = int(os.environ.get("FAULT_STEP", "0"))
AUDIT = os.environ["FAULT_AUDIT"]
current = {"stage": None}


def die():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def armed():
    return current["stage"] == STAGE


real_run = execution.StageRecipe.run


def run_stage(self):
    current["stage"] = self.stage.name
    return real_run(self)


execution.StageRecipe.run = run_stage
real_load = loading.load_pretrained


def load_pretrained(location, *args, **kwargs):
    # Audit: every weights folder the engine loads, and whether it was marked complete then.
    record = {
        "stage": current["stage"],
        "location": str(location),
        "complete": (pathlib.Path(str(location)) / "COMPLETE").is_file(),
    }
    with open(AUDIT, "a") as handle:
        handle.write(json.dumps(record) + "\\n")
    return real_load(location, *args, **kwargs)


loading.load_pretrained = load_pretrained

if FAULT == "step":
    real_step = Trainer.training_step

    def training_step(self, *args, **kwargs):
        loss = real_step(self, *args, **kwargs)  # forward + backward of step global_step + 1
        if armed() and self.state.global_step + 1 == STEP:
            die()  # before the optimizer step, the log record and any checkpoint of STEP
        return loss

    Trainer.training_step = training_step
elif FAULT == "checkpoint":
    real_save_opt = Trainer._save_optimizer_and_scheduler

    def save_optimizer(self, output_dir):
        if armed() and self.state.global_step == STEP:
            import io

            import torch

            buffer = io.BytesIO()
            torch.save(self.optimizer.state_dict(), buffer)
            data = buffer.getvalue()
            # The weights of checkpoint-STEP are written; the optimizer is half written.
            pathlib.Path(output_dir, "optimizer.pt").write_bytes(data[: len(data) // 2])
            die()
        return real_save_opt(self, output_dir)

    Trainer._save_optimizer_and_scheduler = save_optimizer
elif FAULT == "final":
    real_save_model = Trainer.save_model

    def save_model(self, output_dir=None, *args, **kwargs):
        real_save_model(self, output_dir, *args, **kwargs)
        if armed() and output_dir and pathlib.Path(output_dir).name == "final":
            die()  # weights in <partial>/final; no processor, manifest or commit yet

    Trainer.save_model = save_model
elif FAULT == "commit":
    real_write_text = pathlib.Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name == "COMPLETE" and armed():
            die()  # Store.commit: store/<key>/ renamed into place, marker not written
        return real_write_text(self, *args, **kwargs)

    pathlib.Path.write_text = write_text
elif FAULT == "between":
    real_run_or_reuse = runner.run_or_reuse

    def run_or_reuse(plan, stage, store, **kwargs):
        if stage.name == STAGE:
            die()  # every earlier stage has returned (committed), this one has not started
        return real_run_or_reuse(plan, stage, store, **kwargs)

    runner.run_or_reuse = run_or_reuse
elif FAULT:
    raise SystemExit(f"unknown fault {FAULT}")
'''


def engine_args(output_root: Path) -> list[str]:
    # Eval is off: the faults are about training and storing, and eval costs a run's time.
    args = [
        "recipe=r3-two-stage",
        f"output_root={output_root}",
        "data.max_samples=32",
        "eval.enabled=false",
        "eval.max_samples=4",
        "eval.compare=false",
    ]
    for stage in ("vision", "llm"):
        args += [
            f"stage.{stage}.train.num_train_epochs=1",
            f"stage.{stage}.train.save_steps=2",
            f"stage.{stage}.train.per_device_train_batch_size=8",
            f"stage.{stage}.train.logging_steps=1",
        ]
    return args


# (name, fault, stage, step, extra overrides)
CHAIN = [
    ("vision-mid-step", "step", "vision", 3, []),
    ("vision-commit", "commit", "vision", 0, []),
    ("between-stages", "between", "llm", 0, []),
    ("llm-mid-step", "step", "llm", 3, []),
    ("llm-fresh-checkpoint-save", "checkpoint", "llm", 4, ["fresh=true"]),
    ("llm-final-save", "final", "llm", 0, []),
    ("clean", "", "", 0, []),
]
SENTINEL = "left-by-test_faults"


def tree(folder: Path) -> dict[str, tuple[int, int, str]]:
    """relative path -> (size, mtime_ns, sha256) of every file under folder."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns, digest)
    return out


def records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def loss_steps(rows: list[dict[str, Any]]) -> list[int]:
    return [r["step"] for r in rows if "loss" in r]


def losses_by_step(rows: list[dict[str, Any]]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def run_with_fault(
    prelude: Path, args: list[str], audit: Path, fault: str, stage: str, step: int
) -> tuple[int, str]:
    """One engine run forked with the fault armed: its exit code (negative: the signal that
    ended it) and its output."""
    fault_env = {"FAULT": fault, "FAULT_STAGE": stage, "FAULT_STEP": str(step)}
    done = forked_engine(
        *args,
        cwd=ROOT,
        env={"FAULT_AUDIT": str(audit), **fault_env},
        prelude=prelude,
        timeout=RUN_TIMEOUT_S,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Any]:
    from recipe_engine.cli.argv import normalise_argv
    from recipe_engine.config.compose import compose_config
    from recipe_engine.run.planning import plan_from_config
    from recipe_engine.store.store import Store

    tmp = tmp_path_factory.mktemp("faults")
    prelude = tmp / "arm_fault.py"
    prelude.write_text(PRELUDE)
    output_root = tmp / "out"
    args = engine_args(output_root)
    plan = plan_from_config(compose_config(normalise_argv(args)[1]))
    store = Store(output_root)
    keys = {name: stage.fingerprint for name, stage in plan.stages.items()}
    audit = tmp / "audit.jsonl"

    runs: dict[str, dict[str, Any]] = {}
    for name, fault, stage, step, extra in CHAIN:
        if name == "llm-fresh-checkpoint-save" and store.latest_checkpoint(keys["llm"]):
            # Probes: fresh=true must remove the interrupted stage's folder, not resume
            # from it.
            (store.work_dir(keys["llm"]) / SENTINEL).write_text("x")
            (store.checkpoints(keys["llm"]) / "checkpoint-2" / SENTINEL).write_text("x")
        rc, output = run_with_fault(prelude, [*args, *extra], audit, fault, stage, step)
        after: dict[str, Any] = {"rc": rc, "output": output}
        for stage_name, key in keys.items():
            entry, work = store.entry(key), store.work_dir(key)
            latest = store.latest_checkpoint(key)
            after[stage_name] = {
                "entry": tree(entry) if entry.is_dir() else None,
                "entry_mtime": entry.stat().st_mtime_ns if entry.is_dir() else None,
                "complete": store.is_complete(key),
                "work": tree(work) if work.is_dir() else None,
                "work_metrics": records(work / "metrics.jsonl"),
                "entry_metrics": records(entry / "metrics.jsonl"),
                "latest": latest.name if latest else None,
            }
        after["stale"] = sorted(p.name for p in store.root.glob("*.stale"))
        runs[name] = after
    summaries = sorted(output_root.glob("runs/*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    return {
        "runs": runs,
        "keys": keys,
        "store": store,
        "audit": records(audit),
        "summary": json.loads(summaries[-1].read_text()) if summaries else None,
    }


def output_of(chain, run: str) -> str:
    return chain["runs"][run]["output"]


def resumed_from(chain, run: str, stage: str) -> list[str]:
    """Checkpoint names the run's log says the stage resumed from."""
    prefix = f"stage {stage}: resuming from "
    return [
        Path(line.split(prefix, 1)[1].strip()).name
        for line in output_of(chain, run).splitlines()
        if prefix in line
    ]


def test_each_fault_kills_the_engine_and_the_last_rerun_exits_0(chain):
    runs = chain["runs"]
    for name, *_ in CHAIN[:-1]:
        assert runs[name]["rc"] == KILLED, (name, output_of(chain, name)[-3000:])
    assert runs["clean"]["rc"] == 0, output_of(chain, "clean")[-3000:]
    summary = chain["summary"]
    assert summary is not None
    assert {row["stage"]: row["status"] for row in summary["stages"]} == {
        "vision": "cached",  # committed in run 3, before the llm faults
        "llm": "trained",
    }


def test_mid_step_kill_resumes_from_the_last_complete_checkpoint(chain):
    killed = chain["runs"]["vision-mid-step"]["vision"]
    assert killed["entry"] is None and not killed["complete"]
    checkpoints = {p.split("/")[1] for p in killed["work"] if p.startswith("checkpoints/check")}
    assert checkpoints == {"checkpoint-2"}  # nothing of step 3 was saved
    assert killed["latest"] == "checkpoint-2"
    assert loss_steps(killed["work_metrics"]) == [1, 2]

    assert resumed_from(chain, "vision-commit", "vision") == ["checkpoint-2"]
    rows = chain["runs"]["vision-commit"]["vision"]["entry_metrics"]  # copied at commit
    resumed = rows[len(killed["work_metrics"]) :]
    assert loss_steps(resumed)[0] > 2  # the curve continues after the checkpoint step
    assert loss_steps(rows) == [1, 2, 3, 4]


def test_commit_kill_leaves_an_unmarked_folder_that_is_rebuilt_and_never_used(chain):
    runs = chain["runs"]
    killed = runs["vision-commit"]["vision"]
    assert killed["entry"] is not None and not killed["complete"]
    assert "COMPLETE" not in killed["entry"] and "model.safetensors" in killed["entry"]
    assert killed["latest"] == "checkpoint-4"
    # The rerun neither reuses the unmarked folder nor lets llm start from it.
    rerun = output_of(chain, "between-stages")
    assert "stage vision: cached" not in rerun
    assert resumed_from(chain, "between-stages", "vision") == ["checkpoint-4"]
    after = runs["between-stages"]["vision"]
    assert after["complete"] and after["work"] is None and runs["between-stages"]["stale"] == []
    # Rebuilt from the checkpoint and committed again, not the unmarked folder marked late.
    assert after["entry"]["model.safetensors"][1] != killed["entry"]["model.safetensors"][1]
    manifest = chain["store"].manifest(chain["keys"]["vision"])
    assert manifest.metrics.steps == manifest.metrics.planned_steps == 4


def test_no_run_loads_a_store_folder_without_its_marker(chain):
    root = str(chain["store"].root)
    loads = [r for r in chain["audit"] if r["location"].startswith(root)]
    assert [r["stage"] for r in loads] == ["llm"] * 4  # runs 4-7 load vision's output
    assert all(r["complete"] for r in loads), loads


def test_a_stage_committed_before_a_kill_is_cached_and_untouched(chain):
    runs = chain["runs"]
    committed = runs["between-stages"]["vision"]
    assert committed["complete"]
    assert runs["between-stages"]["llm"]["work"] is None  # llm never started
    for name in ("llm-mid-step", "llm-fresh-checkpoint-save", "llm-final-save", "clean"):
        assert "stage vision: cached" in output_of(chain, name), name
        assert resumed_from(chain, name, "vision") == []
        assert runs[name]["vision"]["entry"] == committed["entry"], name  # size, mtime, sha256
        assert runs[name]["vision"]["entry_mtime"] == committed["entry_mtime"], name


def test_fresh_true_starts_over_instead_of_resuming(chain):
    runs = chain["runs"]
    before = runs["llm-mid-step"]["llm"]
    assert before["latest"] == "checkpoint-2" and loss_steps(before["work_metrics"]) == [1, 2]
    assert resumed_from(chain, "llm-fresh-checkpoint-save", "llm") == []
    after = runs["llm-fresh-checkpoint-save"]["llm"]
    assert not any(SENTINEL in path for path in after["work"])  # the old folder was removed
    assert loss_steps(after["work_metrics"]) == [1, 2, 3, 4]  # first logged step is 1
    # Step 1 runs on the stage's initial weights, as in the killed run, not on checkpoint-2's.
    # (Later steps are not compared: on CPU the same step 2 varies ~0.1-0.3% run to run.)
    old, new = losses_by_step(before["work_metrics"]), losses_by_step(after["work_metrics"])
    assert new[1] == pytest.approx(old[1], rel=1e-6)


def test_half_written_checkpoint_is_not_resumed_from(chain):
    runs = chain["runs"]
    killed = runs["llm-fresh-checkpoint-save"]["llm"]["work"]
    assert "checkpoints/checkpoint-4/adapter_model.safetensors" in killed
    assert "checkpoints/checkpoint-4/optimizer.pt" in killed
    assert "checkpoints/checkpoint-4/trainer_state.json" not in killed
    assert runs["llm-fresh-checkpoint-save"]["llm"]["latest"] == "checkpoint-2"
    assert resumed_from(chain, "llm-final-save", "llm") == ["checkpoint-2"]
    # The resumed curve continues after checkpoint-2 and matches the uninterrupted fresh run.
    reference = losses_by_step(runs["llm-fresh-checkpoint-save"]["llm"]["work_metrics"])
    rows = runs["llm-final-save"]["llm"]["work_metrics"]
    # The log keeps checkpoint-2's steps and continues from there: one curve, no doubling back.
    assert loss_steps(rows) == [1, 2, 3, 4]
    resumed = [row for row in rows if row.get("step", 0) > 2]
    got = losses_by_step(resumed)
    # Step 3 is a forward pass on checkpoint-2's weights and the same batch: exact when the
    # weights and the data order were restored. Step 4 also depends on step 3's update, which
    # is not bit-reproducible on CPU here, so it gets a loose tolerance.
    assert got[3] == pytest.approx(reference[3], rel=1e-5)
    assert got[4] == pytest.approx(reference[4], rel=2e-2)


def test_final_save_kill_leaves_nothing_usable_and_the_rerun_commits(chain):
    runs = chain["runs"]
    killed = runs["llm-final-save"]["llm"]
    assert killed["entry"] is None and not killed["complete"]
    final = {p for p in killed["work"] if p.startswith("final/")}
    assert "final/adapter_model.safetensors" in final and "final/manifest.json" not in final
    assert killed["latest"] == "checkpoint-4"
    assert resumed_from(chain, "clean", "llm") == ["checkpoint-4"]
    after = runs["clean"]["llm"]
    assert after["complete"] and after["work"] is None and runs["clean"]["stale"] == []
    assert {"manifest.json", "adapter_config.json", "processor_config.json"} <= set(after["entry"])
    manifest = chain["store"].manifest(chain["keys"]["llm"])
    assert manifest.metrics.steps == manifest.metrics.planned_steps == 4


def test_outputs_load_after_recovery(chain):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    store, keys = chain["store"], chain["keys"]
    vision_dir, llm_dir = store.entry(keys["vision"]), store.entry(keys["llm"])
    vision = AutoModelForImageTextToText.from_pretrained(vision_dir)
    assert any(p.numel() for p in vision.parameters())
    manifest = store.manifest(keys["llm"])
    assert manifest.format == "peft_adapter"
    assert manifest.base_path(store.root) == str(vision_dir)
    base = AutoModelForImageTextToText.from_pretrained(manifest.base_path(store.root))
    llm = PeftModel.from_pretrained(base, llm_dir)
    lora = [p for n, p in llm.named_parameters() if "lora_B" in n]
    assert lora and any(torch.count_nonzero(p) for p in lora)  # trained, not the zero init


def test_resumed_manifest_keeps_the_losses_logged_before_the_resume(chain):
    store, keys = chain["store"], chain["keys"]
    for stage in ("vision", "llm"):
        logged = losses_by_step(records(store.entry(keys[stage]) / "metrics.jsonl"))
        manifest = store.manifest(keys[stage])
        # A resumed stage's manifest keeps the losses logged before the interruption.
        assert manifest.metrics.train_losses == [logged[s] for s in sorted(logged)], stage


def test_metrics_log_has_one_record_per_step_after_resumes(chain):
    rows = records(chain["store"].entry(chain["keys"]["llm"]) / "metrics.jsonl")
    steps = loss_steps(rows)
    assert steps == [1, 2, 3, 4]
    # Resuming from checkpoint-N drops what the killed run logged after step N.
    assert steps == sorted(set(steps)), steps


def write_checkpoints_killed_mid_state(folder: Path) -> None:
    """checkpoint-2 whole, then checkpoint-4 with SIGKILL halfway through its
    trainer_state.json: TrainerState.save_to_json's own write, cut short. Run in a child."""
    import transformers.trainer_callback as callbacks
    from transformers.trainer_callback import TrainerState

    (folder / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoint-4").mkdir(parents=True)
    TrainerState(global_step=2, max_steps=4).save_to_json(
        str(folder / "checkpoint-2" / "trainer_state.json")
    )

    class Half:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Half:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def write(self, text: str) -> None:
            self.handle.write(text[: len(text) // 2])
            self.handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def half_open(path: str, mode: str = "r", *args: Any, **kwargs: Any) -> Half:
        return Half(open(path, mode, *args, **kwargs))

    callbacks.open = half_open  # TrainerState.save_to_json's open() now dies mid-write
    TrainerState(global_step=4, max_steps=4).save_to_json(
        str(folder / "checkpoint-4" / "trainer_state.json")
    )


def test_a_truncated_trainer_state_is_not_taken_for_a_complete_checkpoint(tmp_path):
    from transformers.trainer_callback import TrainerState

    from recipe_engine.store.store import Store

    store, key = Store(tmp_path), "f" * 64
    folder = store.checkpoints(key)
    # A forked child, SIGKILLed as it writes: a real process death, without a fresh
    # interpreter's seconds of importing transformers (this process has imported it).
    writer = multiprocessing.get_context("fork").Process(
        target=write_checkpoints_killed_mid_state, args=(folder,)
    )
    writer.start()
    writer.join(timeout=120)
    if writer.exitcode is None:  # hung: stopped with SIGTERM, which the assertion refuses
        writer.terminate()
        writer.join()
    assert writer.exitcode == KILLED, writer.exitcode
    with pytest.raises(json.JSONDecodeError):  # what Trainer.train(resume_from_checkpoint=) hits
        TrainerState.load_from_json(str(folder / "checkpoint-4" / "trainer_state.json"))
    # A checkpoint whose trainer_state.json is cut short is skipped for the one before it.
    assert store.latest_checkpoint(key) == folder / "checkpoint-2"
