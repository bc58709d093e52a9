"""`launcher=slurm` in the plan: each stage's job sized from its placement, a child after its
parent, what the partition cannot give refused with the key that asked for it; `nodes`
checked before anything is read. The partition is data here (tests/cluster/ meet a real one)."""

from __future__ import annotations

import pytest
from machines import CPU_ONLY
from plans import plan

from recipe_engine.config.compose import compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import NodeOffer, Partition
from recipe_engine.launchers.slurm_jobs import (
    check_request,
    rendezvous_port,
    sweep_job_request,
    time_minutes,
)
from recipe_engine.plan.jobs import plan_jobs
from recipe_engine.plan.render import render_plan
from recipe_engine.run.planning import plan_from_config

CPU_PARTITION = Partition(
    "debug", "slurm", tuple(NodeOffer(f"n{i}", 2, 8000, 0) for i in (1, 2)), max_time_min=None
)
GPU_PARTITION = Partition(
    "gpu", "slurm", tuple(NodeOffer(f"g{i}", 64, 512000, 8) for i in range(4)), max_time_min=2880
)


def slurm_plan(output_root, *overrides: str, partition: Partition = CPU_PARTITION):
    """The plan with `launcher=slurm` on `partition`, its store at `output_root`."""
    overrides = ("launcher=slurm", f"output_root={output_root}", *overrides)
    return plan_from_config(compose_config(list(overrides)), CPU_ONLY, partition)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("90", 90),
        ("30:00", 30),
        ("30:01", 31),
        ("04:00:00", 240),
        ("1-00:00:00", 1440),
        ("2-03:30:00", 3090),
    ],
)
def test_slurm_time_reads_every_form_sbatch_takes(text, minutes):
    assert time_minutes(text) == minutes


@pytest.mark.parametrize("text", ["4h", "", "0", "1:2:3:4"])
def test_a_time_sbatch_would_not_take_is_refused_with_its_key(text):
    with pytest.raises(RecipeError) as refused:
        time_minutes(text)
    assert refused.value.key == "slurm.time"


def test_every_stage_is_a_job_and_a_child_waits_for_its_parent():
    planned = plan("recipe=r3-two-stage", "device=cpu")
    jobs = plan_jobs(planned, CPU_PARTITION, stored=set())
    assert list(jobs) == ["vision", "llm"]
    assert jobs["vision"].after == () and jobs["llm"].after == ("vision",)
    vision = jobs["vision"]
    assert (vision.nodes, vision.processes_per_node, vision.gpus_per_node) == (1, 1, 0)
    assert vision.cpus_per_node == 1 and vision.time_min == 240 and vision.pool == "partition debug"
    assert 2 <= vision.mem_gb <= 4  # a tiny model: the process's runtime and little else


def test_a_stored_parent_is_not_submitted_and_its_child_waits_for_nothing():
    planned = plan("recipe=r3-two-stage", "device=cpu")
    jobs = plan_jobs(planned, CPU_PARTITION, stored={"vision"})
    assert list(jobs) == ["llm"] and jobs["llm"].after == ()


def test_a_gpu_stage_asks_for_its_processes_gpus_and_eight_cpus_each():
    planned = plan("recipe=r1-llm-only", "hardware=8x-a100-80gb", "parallel=ddp", "nproc=4")
    [job] = plan_jobs(planned, GPU_PARTITION, stored=set()).values()
    assert (job.processes_per_node, job.gpus_per_node, job.cpus_per_node) == (4, 4, 32)


def test_a_stage_on_two_nodes_has_the_world_size_of_both(tmp_path):
    planned = slurm_plan(
        tmp_path, "recipe=text-lora", "device=cpu", "parallel=ddp", "nodes=2", "nproc=1"
    )
    stage = planned.stages["llm"]
    assert stage.placement.world_size == 2 and stage.placement.starter == "scheduler"
    assert (
        "2 nodes: the stage's SLURM job starts one torchrun per node (srun), 1 process(es) "
        "each, 2 in all, rendezvous at its first node."
    ) in stage.placement.notes
    [job] = planned.jobs.values()
    assert (job.nodes, job.processes_per_node) == (2, 1)


def test_a_stage_on_two_nodes_plans_its_rendezvous_port(tmp_path):
    """From the job id unless slurm.master_port says otherwise; either way the plan says it,
    and every node reaches the same number alone."""
    two_nodes = ("recipe=text-lora", "device=cpu", "parallel=ddp", "nodes=2", "nproc=1")
    [derived] = slurm_plan(tmp_path, *two_nodes).jobs.values()
    assert "rendezvous on the first node's port 20000 + job id mod 20000" in derived.describe()
    assert rendezvous_port(None, 1234567) == 20000 + 1234567 % 20000
    chosen_plan = slurm_plan(tmp_path, *two_nodes, "slurm.master_port=29500")
    [chosen] = chosen_plan.jobs.values()
    assert chosen_plan.config.slurm.master_port == 29500 and "port 29500" in chosen.describe()
    assert rendezvous_port(chosen_plan.config.slurm.master_port, 1234567) == 29500
    [one_node] = slurm_plan(tmp_path, "recipe=text-lora", "device=cpu").jobs.values()
    assert "rendezvous" not in one_node.describe()


@pytest.mark.parametrize("port", ["80", "70000"])
def test_a_master_port_no_job_can_listen_on_is_refused_naming_the_key(tmp_path, port):
    with pytest.raises(RecipeError, match="1024 to 65535") as refused:
        slurm_plan(tmp_path, "recipe=text-lora", "device=cpu", f"slurm.master_port={port}")
    assert refused.value.key == "slurm.master_port"


def test_the_same_stage_on_two_nodes_or_two_local_processes_has_one_key(tmp_path):
    on_nodes = slurm_plan(
        tmp_path, "recipe=text-lora", "device=cpu", "parallel=ddp", "nodes=2", "nproc=1"
    )
    here = plan("recipe=text-lora", "device=cpu", "parallel=ddp", "nproc=2")
    assert on_nodes.stages["llm"].fingerprint == here.stages["llm"].fingerprint


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (("nodes=3", "parallel=ddp", "nproc=1"), "nodes"),
        (("slurm.cpus_per_task=4",), "slurm.cpus_per_task"),
        (("slurm.mem_gb=16",), "slurm.mem_gb"),
        (("device=cuda", "hardware=8x-a100-80gb"), "device"),
    ],
)
def test_what_the_partition_cannot_give_is_refused_naming_the_key(overrides, key, tmp_path):
    with pytest.raises(RecipeError) as refused:
        slurm_plan(tmp_path, "recipe=text-lora", "device=cpu", *overrides)
    assert refused.value.key == key
    assert "partition `debug`" in str(refused.value)


def test_more_time_than_the_partition_allows_is_refused(tmp_path):
    with pytest.raises(RecipeError, match="allows 2880"):
        slurm_plan(
            tmp_path,
            "recipe=text-lora",
            "hardware=8x-a100-80gb",
            "slurm.time=3-00:00:00",
            partition=GPU_PARTITION,
        )


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (("nodes=2",), "parallel"),  # several nodes train with data parallelism only
        (("nodes=2", "parallel=ddp", "nproc=1"), "nodes"),  # and under a scheduler only
        (("nodes=0",), "nodes"),
        (("launcher=slrum",), "launcher"),
        (("slurm.time=4h",), "slurm.time"),
    ],
)
def test_what_cannot_work_on_any_cluster_is_refused_before_anything_is_read(overrides, key):
    with pytest.raises(RecipeError) as refused:
        plan("recipe=text-lora", "device=cpu", *overrides)
    assert refused.value.key == key


def test_a_sweep_job_asking_more_than_a_node_has_names_the_launcher_key():
    request = sweep_job_request({"cpus_per_task": 8, "mem_gb": 64, "timeout_min": 240})
    with pytest.raises(RecipeError) as refused:
        check_request(request, CPU_PARTITION)
    assert refused.value.key == "hydra.launcher.cpus_per_task"
    fits = sweep_job_request({"cpus_per_task": 1, "mem_gb": 3, "gpus_per_node": None})
    check_request(fits, CPU_PARTITION)


def test_the_plan_prints_each_stage_job_or_why_it_has_none(tmp_path):
    planned = slurm_plan(
        tmp_path, "recipe=r3-two-stage", "device=cpu", "only=[llm]", "force=[vision]"
    )
    text = render_plan(planned)
    assert "    job: none (in the store, or left out by `only`)" in text
    assert "    job: 1 node(s), 1 process(es) per node, 1 CPU(s)" in text
