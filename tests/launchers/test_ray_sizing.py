"""`launcher=ray` in the plan, from hand-written cluster nodes: each stage's tasks sized from its
placement, its threads its share of the CPUs; what no node can hold, and more nodes than can
hold a stage, refused with the key that asked; the address and `ray.*` keys checked before
anything is read. tests/cluster/test_ray_*.py meet a real cluster."""

from __future__ import annotations

import pytest
from machines import CPU_ONLY
from plans import plan

from recipe_engine.config.compose import compose_config, to_engine_config
from recipe_engine.errors import RecipeError
from recipe_engine.launchers.kinds import NodeOffer, Partition
from recipe_engine.launchers.ray.cluster import cluster_address
from recipe_engine.plan.jobs import plan_jobs
from recipe_engine.run.planning import plan_from_config

CLUSTER = "the Ray cluster at 10.0.0.1:6379"
CPU_NODES = Partition(CLUSTER, "ray", (NodeOffer("a", 2, 6000, 0), NodeOffer("b", 4, 6000, 0)))
GPU_NODES = Partition(
    CLUSTER, "ray", (NodeOffer("g1", 32, 200000, 2), NodeOffer("g2", 32, 200000, 2))
)


def ray_plan(partition: Partition, *overrides: str):
    """The plan with `launcher=ray` on the hand-written `partition` (its nodes not asked)."""
    overrides = ("launcher=ray", "ray.address=10.0.0.1:6379", *overrides)
    return plan_from_config(compose_config(list(overrides)), CPU_ONLY, partition)


def test_every_stage_is_a_task_a_child_after_its_parent_sized_from_its_placement():
    jobs = plan_jobs(plan("recipe=r3-two-stage", "device=cpu"), CPU_NODES, stored=set())
    vision, llm = jobs["vision"], jobs["llm"]
    assert (vision.nodes, vision.processes_per_node, vision.gpus_per_node) == (1, 1, 0)
    assert (vision.cpus_per_node, vision.time_min, vision.pool) == (1, None, CLUSTER)
    assert vision.after == () and llm.after == ("vision",)
    assert vision.describe().startswith("job: 1 node(s), 1 process(es) per node, 1 CPU(s)")
    assert vision.describe().endswith(
        f"on {CLUSTER}; 1 torch thread(s) per process (its share of the CPUs)"
    )


def test_a_gpu_stage_holds_its_processes_gpus_on_one_node_with_eight_cpus_each():
    planned = plan("recipe=r1-llm-only", "hardware=2x-rtx6000-ada", "parallel=ddp")
    [job] = plan_jobs(planned, GPU_NODES, stored=set()).values()
    assert (job.processes_per_node, job.gpus_per_node, job.cpus_per_node) == (2, 2, 16)
    assert "8 torch thread(s) per process" in job.describe()


def test_a_stage_on_two_nodes_is_spread_over_two_of_them():
    planned = ray_plan(CPU_NODES, "recipe=text-lora", "device=cpu", "parallel=ddp", "nproc=1",
                       "nodes=2")  # fmt: skip
    [job] = planned.jobs.values()
    assert job.nodes == 2 and "one task per node, spread over distinct nodes" in job.describe()
    assert planned.stages["llm"].placement.starter == "scheduler"
    assert (
        "2 nodes: one Ray task per node (a placement group spreads them) starts its torchrun, "
        "1 process(es) each, 2 in all, rendezvous at its first node."
    ) in planned.stages["llm"].placement.notes


@pytest.mark.parametrize(
    ("overrides", "partition", "key", "said"),
    [
        (("ray.num_cpus=8",), CPU_NODES, "ray.num_cpus", "Set `ray.num_cpus=4` or fewer"),
        (("ray.mem_gb=7",), CPU_NODES, "ray.mem_gb", "Set `ray.mem_gb` to what a node has"),
        (("hardware=2x-rtx6000-ada",), CPU_NODES, "device", "Use `device=cpu`"),
        (("hardware=8x-a100-80gb", "parallel=ddp"), GPU_NODES, "device", "200 GB, 2 GPU(s))"),
    ],
)
def test_what_no_node_can_hold_is_one_message_naming_the_stage_and_the_largest_node(
    overrides, partition, key, said
):
    planned = plan("recipe=text-lora", *overrides)
    with pytest.raises(RecipeError) as refused:
        plan_jobs(planned, partition, stored=set())
    message = str(refused.value)
    assert refused.value.key == key and said in message
    assert message.startswith("Stage `llm` needs ") and f"no node of {CLUSTER}" in message
    largest = partition.largest()
    assert f"its largest is {largest.describe()}" in message


def test_more_nodes_than_can_hold_a_stage_is_refused_rather_than_left_waiting():
    one_big = Partition(CLUSTER, "ray", (NodeOffer("a", 1, 6000, 0), NodeOffer("b", 4, 6000, 0)))
    overrides = ("recipe=text-lora", "device=cpu", "parallel=ddp", "nproc=2", "nodes=2")
    with pytest.raises(RecipeError, match=r"only 1 node\(s\) of .* can hold that \(b\)") as refused:
        ray_plan(one_big, *overrides)
    assert refused.value.key == "nodes" and "Set `nodes=1` or fewer" in str(refused.value)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("ray.num_cpus=0", "ray.num_cpus"),
        ("ray.mem_gb=0", "ray.mem_gb"),
        ("ray.max_retries=-1", "ray.max_retries"),
        ("ray.placement_timeout_s=0", "ray.placement_timeout_s"),
    ],
)
def test_ray_keys_that_cannot_work_are_refused_before_anything_is_read(override, key):
    with pytest.raises(RecipeError) as refused:
        plan("recipe=text-lora", "device=cpu", override)
    assert refused.value.key == key


@pytest.mark.parametrize(
    ("address", "variable", "said"),
    [
        (None, None, "needs the Ray cluster's address"),
        ("http://10.0.0.1:8265", None, "is a Ray dashboard's address"),
        (None, "https://10.0.0.1:8265", "`RAY_ADDRESS=https://10.0.0.1:8265` is a Ray dashboard"),
        ("local", None, "would start a new one-machine Ray instance here"),
    ],
)
def test_an_address_that_names_no_running_cluster_is_refused_with_where_to_find_one(
    monkeypatch, address, variable, said
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if variable:
        monkeypatch.setenv("RAY_ADDRESS", variable)
    overrides = ["launcher=ray", *([f"ray.address={address}"] if address else [])]
    with pytest.raises(RecipeError, match=said) as refused:
        cluster_address(to_engine_config(compose_config(overrides)))
    assert refused.value.key == "ray.address"


def test_the_address_comes_from_the_key_else_the_variable_ray_reads(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    config = to_engine_config(compose_config(["launcher=ray"]))
    assert cluster_address(config) == "10.0.0.9:6379"
    config = to_engine_config(compose_config(["launcher=ray", "ray.address=10.0.0.1:6379"]))
    assert cluster_address(config) == "10.0.0.1:6379"
