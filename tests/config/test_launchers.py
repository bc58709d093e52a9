"""The shipped submitit launcher configs: what a scheduled job asks for, from the recipe."""

from __future__ import annotations

import shutil

import pytest

from recipe_engine.config.compose import compose_config


def launcher(*overrides: str):
    return compose_config(list(overrides), with_hydra=True).hydra.launcher


@pytest.mark.parametrize(
    ("overrides", "gpus"),
    [
        ((), 1),  # this machine says nothing about the nodes: one GPU
        (("hardware=8x-a100-80gb",), 8),  # a profile describes the GPUs a job gets
        (("hardware=cpu-only",), 0),
        (("device=cpu",), 0),
    ],
)
def test_gpus_per_job_come_from_the_recipe(overrides, gpus):
    slurm = launcher("hydra/launcher=recipe-submitit-slurm", *overrides)
    # No GPU is no --gpus-per-node at all: a cluster without GPU gres refuses `=0`.
    assert slurm.gpus_per_node == (gpus or None)
    assert launcher("hydra/launcher=recipe-submitit-local", *overrides).gpus_per_node == gpus


def test_slurm_config_extends_the_plugin_and_takes_its_keys():
    slurm = launcher(
        "hydra/launcher=recipe-submitit-slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.timeout_min=30",
    )
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.partition, slurm.gpus_per_node, slurm.timeout_min) == ("gpu", 4, 30)
    assert slurm.name == "r3-two-stage" and slurm.tasks_per_node == 1


@pytest.mark.parametrize("name", ["submitit_slurm", "submitit_local"])
def test_the_plugins_own_launchers_compose(name):
    assert launcher(f"hydra/launcher={name}")._target_.startswith("hydra_plugins.hydra_submitit")


def test_a_scheduled_job_plans_on_the_node_it_runs_on():
    """The profile sized the request; the job itself reads the node (and its scheduler's
    CUDA_VISIBLE_DEVICES), not the profile."""
    from recipe_engine.config.compose import to_engine_config
    from recipe_engine.run.hydra_job import plan_on_this_node
    from recipe_engine.run.planning import plan_from_config

    cfg = compose_config(["recipe=r2-vision-only", "hardware=8x-a100-80gb"])
    on_login_node = plan_from_config(to_engine_config(cfg))
    assert on_login_node.hardware == "8x-a100-80gb"
    assert on_login_node.stages["vision"].placement.device == "cuda"
    on_the_node = plan_on_this_node(cfg)
    assert on_the_node.hardware == "local"
    assert on_the_node.config.hardware.detect


def test_a_slurm_sweep_without_slurm_is_one_message_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    from recipe_engine.cli.main import main
    from recipe_engine.launchers import slurm_cluster as scheduler

    # A login node of a cluster has SLURM's commands; this test is about a machine without.
    real_which = shutil.which
    monkeypatch.setattr(
        scheduler.shutil, "which", lambda n: None if n == "sbatch" else real_which(n)
    )

    argv = [
        "-m",
        "hydra/launcher=recipe-submitit-slurm",
        "recipe=r1-llm-only",
        f"output_root={tmp_path / 'out'}",
        "seed=1,2",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: `hydra/launcher` submits to SLURM, but `sbatch` is not on PATH")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_launcher_slurm_without_slurm_is_one_message_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    from recipe_engine.cli.main import main
    from recipe_engine.launchers import slurm_cluster as scheduler

    real_which = shutil.which
    monkeypatch.setattr(
        scheduler.shutil, "which", lambda n: None if n == "sbatch" else real_which(n)
    )
    argv = ["recipe=r1-llm-only", "launcher=slurm", f"output_root={tmp_path / 'out'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: `launcher=slurm` submits to SLURM, but `sbatch` is not on PATH")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
