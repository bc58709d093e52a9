"""A submitted run's record of its stage jobs: `jobs.json` in the run folder, written at
submission (and, by a launcher whose driver waits, again as its jobs start).

`runs jobs` reads it back, with the jobs' states from their launcher; the stage jobs
themselves write their runs under `<run folder>/<stage>/`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.files import atomic_write_json

JOBS_FILE = "jobs.json"
# `runs jobs`, as the `runs` verb's usage lists it.
JOBS_USAGE = """\
  jobs [RUN_DIR]        a run's stage jobs on a scheduler (a launcher= with one; the newest
                        such run without RUN_DIR): each job's state there, nodes, time and
                        stage key; for a job that did not finish, which parent or node
                        stopped it and what to run"""


@dataclass(frozen=True)
class SubmittedJob:
    stage: str
    job_id: str
    key: str  # the stage's fingerprint: where its output lands in the store
    after: tuple[str, ...]  # stages whose jobs it waits for
    nodes: int
    log: str  # the stage's output on its first node
    command: str  # what re-submits the same run (its unfinished stages)
    launcher: str = "slurm"  # the launcher that submitted it (records before it: SLURM's)

    @property
    def label(self) -> str:
        """The job as its scheduler names it ("SLURM job 42")."""
        return f"{self.launcher.upper()} job {self.job_id}"


def save_jobs(run_dir: Path, jobs: list[SubmittedJob]) -> None:
    atomic_write_json(run_dir / JOBS_FILE, [dataclasses.asdict(job) for job in jobs])


def load_jobs(run_dir: Path) -> list[SubmittedJob]:
    path = run_dir / JOBS_FILE
    if not path.is_file():
        raise RecipeError(
            f"`{run_dir}` holds no {JOBS_FILE}: it is not a run whose stages were submitted "
            "to a scheduler. `runs` lists the runs.",
        )
    rows = json.loads(path.read_text())
    return [SubmittedJob(**{**row, "after": tuple(row["after"])}) for row in rows]


def submitted_runs(root: Path) -> list[Path]:
    """Run folders under `root/runs` whose stages were submitted as jobs, oldest first."""
    found = (root / "runs").glob(f"*/*/{JOBS_FILE}")
    return sorted((p.parent for p in found), key=lambda p: p.stat().st_mtime)
