"""`launcher=local`: this machine trains the stages in order, in this process (or the
processes the placement starts); there is no job to size or submit."""

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
from recipe_engine.launchers.records import SubmittedJob


class Local:
    name = "local"
    scheduled = False
    waits = True  # the run trains here
    node_starter = ""  # one machine: never several nodes
    command_keys = ()

    def check(self, cfg: EngineConfig) -> None:
        return None

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        return None

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        return {}  # never asked: no scheduler offers it a partition

    def schedules(self, hydra_launcher: str) -> bool:
        return False

    def check_sweep(self, hydra_launcher: Mapping[str, Any]) -> None:
        return None

    def check_nodes(self, cfg: EngineConfig, code: Sequence[StageCode]) -> None:
        return None  # this machine planned the stages: it has what they run

    def submit(self, submission: Submission) -> list[SubmittedJob]:
        # Not scheduled: the run verb runs the stages here (`run.hydra_job`), never this.
        raise RuntimeError("launcher=local submits no jobs: the run trains in this process")

    def job_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        return {}  # it submits no jobs

    def recorded_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        return {}  # it submits no jobs

    def down_nodes(self) -> dict[str, DownNode]:
        return {}
