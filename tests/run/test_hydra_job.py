"""One planned run as a Hydra job (`run.hydra_job`): the outcome comes back to the caller (the
`run` verb, an experiment), never as a SystemExit, and a failure is one message."""

from __future__ import annotations

from recipe_engine.config.compose import compose_config
from recipe_engine.errors import EXIT_INCOMPLETE
from recipe_engine.evaluate.after_run import finish_run
from recipe_engine.run.hydra_job import run_composed, without_hydra
from recipe_engine.run.planning import plan_from_config


def test_a_run_that_stops_returns_its_exit_code_and_keeps_its_traceback(tmp_path, capsys):
    run_dir = tmp_path / "run"
    overrides = ["recipe=text-lora", f"output_root={tmp_path / 'out'}", f"hydra.run.dir={run_dir}"]
    composed = compose_config(overrides, with_hydra=True)
    plan = plan_from_config(without_hydra(composed))
    # What no check foresaw: the store's folder became a file after the plan was made.
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "store").write_text("not a folder")
    code = finish_run(run_composed(composed, plan))
    assert code == EXIT_INCOMPLETE
    [message] = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "the run stopped: " in message and "the traceback is in" in message
    assert (run_dir / "traceback.txt").is_file() and (run_dir / ".hydra").is_dir()


def test_a_finished_rank_leaves_its_process_group_before_the_interpreter_exits(tmp_path):
    """A gloo group left to the interpreter's exit can abort the process (SIGABRT) after a run
    that committed everything: each rank destroys its group once its part is done."""
    import torch.distributed as dist

    from recipe_engine.run.hydra_job import leave_process_group

    store = dist.FileStore(str(tmp_path / "rendezvous"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    assert dist.is_initialized()
    leave_process_group()
    assert not dist.is_initialized()
    leave_process_group()  # no group (a single-process run): nothing to do
