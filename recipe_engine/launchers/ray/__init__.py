"""`launcher=ray`: every stage the store lacks runs on a running Ray cluster, one Ray task per
node of the stage in a placement group, a child after its parent, siblings at once; this
command is the cluster's driver and waits for them, so the run ends here as a local one does
(its summary, its report). Its keys are `ray.*` (`config.schema.RayConfig`).

`cluster` connects to the cluster and reads its nodes (the `Partition` the jobs are sized
for), and checks each node finds what the stages run; `sizing` sizes each stage's tasks and
refuses what no node can hold; `driver` runs them and records their states; `node` is what
runs on a node. Ray is imported only by these, when they are called: the extra `.[ray]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import StageCode
from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.kinds import (
    DownNode,
    JobState,
    Partition,
    StageJob,
    StageNeeds,
    Submission,
)
from recipe_engine.launchers.ray import cluster, sizing
from recipe_engine.launchers.records import SubmittedJob


class Ray:
    name = "ray"
    scheduled = True
    waits = True  # this command drives the cluster until its stages end
    node_starter = "one Ray task per node (a placement group spreads them) starts its torchrun"
    command_keys = (
        ("ray.runtime_env", "Ray's runtime_env installs packages and ships code to the nodes"),
    )

    def check(self, cfg: EngineConfig) -> None:
        sizing.check_keys(cfg)

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        return cluster.read_partition(cfg)

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        return {stage.stage: sizing.stage_job(stage, cfg, partition) for stage in needs}

    def schedules(self, hydra_launcher: str) -> bool:
        return False  # no Hydra launcher hands its jobs to Ray: `launcher=ray` runs the stages

    def check_sweep(self, hydra_launcher: Mapping[str, Any]) -> None:
        return None

    def check_nodes(self, cfg: EngineConfig, code: Sequence[StageCode]) -> None:
        cluster.check_nodes(cfg, code)

    def submit(self, submission: Submission) -> list[SubmittedJob]:
        # Imported here: planning imports this module, and driving is the run's.
        from recipe_engine.launchers.ray.driver import Driver

        return Driver(submission).drive()

    def job_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        return self.recorded_states(run_dir, jobs)  # the driver recorded them as they changed

    def recorded_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        from recipe_engine.launchers.ray.driver import read_states

        return read_states(run_dir, jobs)

    def down_nodes(self) -> dict[str, DownNode]:
        return {}  # a lost node's stage runs again elsewhere (driver): nothing to bring back
