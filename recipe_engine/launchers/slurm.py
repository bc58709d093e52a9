"""`launcher=slurm`: every stage the store lacks is one SLURM job (submitit), a child after
its parent; `nodes` > 1 gives each stage that many nodes. Its keys are `slurm.*`
(`config.schema.SlurmConfig`); the partition is read from `sinfo` (`slurm_cluster`), the jobs
sized from it (`slurm_jobs`)."""

from __future__ import annotations

from collections.abc import Sequence

from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers.kinds import Partition, StageJob, StageNeeds
from recipe_engine.launchers.slurm_cluster import read_partition
from recipe_engine.launchers.slurm_jobs import stage_job, time_minutes


class Slurm:
    name = "slurm"
    scheduled = True

    def check(self, cfg: EngineConfig) -> None:
        time_minutes(cfg.slurm.time)

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        return read_partition(cfg.slurm.partition)

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        return {stage.stage: stage_job(stage, cfg, partition) for stage in needs}
