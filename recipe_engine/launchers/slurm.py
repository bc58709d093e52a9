"""`launcher=slurm`: every stage the store lacks is one SLURM job (submitit), a child after
its parent; `nodes` > 1 gives each stage that many nodes. Its keys are `slurm.*`
(`config.schema.SlurmConfig`); the partition is read from `sinfo` (`slurm_cluster`), the jobs
sized from it (`slurm_jobs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import StageCode
from recipe_engine.config.schema import EngineConfig
from recipe_engine.launchers import slurm_cluster
from recipe_engine.launchers.kinds import (
    DownNode,
    JobState,
    Partition,
    StageJob,
    StageNeeds,
    Submission,
)
from recipe_engine.launchers.records import SubmittedJob
from recipe_engine.launchers.slurm_cluster import read_partition, require_slurm
from recipe_engine.launchers.slurm_jobs import (
    check_request,
    stage_job,
    sweep_job_request,
    time_minutes,
)


class Slurm:
    name = "slurm"
    scheduled = True
    waits = False  # sbatch queues the jobs; `runs jobs` follows them
    node_starter = "the stage's SLURM job starts one torchrun per node (srun)"
    command_keys = (
        ("slurm.setup", "a scheduler's shell lines run commands on the cluster"),
        ("slurm.additional_parameters", "a scheduler's options run commands on the cluster"),
    )

    def check(self, cfg: EngineConfig) -> None:
        time_minutes(cfg.slurm.time)

    def read_partition(self, cfg: EngineConfig) -> Partition | None:
        return read_partition(cfg.slurm.partition)

    def size_jobs(
        self, needs: Sequence[StageNeeds], cfg: EngineConfig, partition: Partition
    ) -> dict[str, StageJob]:
        return {stage.stage: stage_job(stage, cfg, partition) for stage in needs}

    def schedules(self, hydra_launcher: str) -> bool:
        """The submitit plugin's options (`submitit_local`, `submitit_slurm`) and the engine's
        own launcher configs built on them: submitit's executors assign each job's GPUs."""
        return "submitit" in hydra_launcher

    def check_sweep(self, hydra_launcher: Mapping[str, Any]) -> None:
        """A SLURM sweep: SLURM's commands on PATH, and what each job asks for against the
        partition (submitit would stop with sbatch's traceback after Hydra made the sweep
        folder)."""
        if str(hydra_launcher.get("_target_", "")).endswith(".SlurmLauncher"):
            require_slurm("hydra/launcher")
            partition = read_partition(hydra_launcher.get("partition"))
            check_request(sweep_job_request(hydra_launcher), partition)

    def check_nodes(self, cfg: EngineConfig, code: Sequence[StageCode]) -> None:
        return None  # a job reaches its node only once scheduled: it replans there

    def submit(self, submission: Submission) -> list[SubmittedJob]:
        # Imported here: planning imports this module, and submitting is the run verb's.
        from recipe_engine.launchers.slurm_submit import submit_jobs

        return submit_jobs(submission)

    def job_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        return slurm_cluster.job_states([job.job_id for job in jobs])

    def recorded_states(self, run_dir: Path, jobs: list[SubmittedJob]) -> dict[str, JobState]:
        return {}  # sacct knows them: `runs jobs` asks it

    def down_nodes(self) -> dict[str, DownNode]:
        return slurm_cluster.down_nodes()
