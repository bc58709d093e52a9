"""The sweep table: a Hydra callback that records every multirun job and tabulates the sweep.

Registered in `recipe_engine/conf/config.yaml` under `hydra.callbacks`. After each job it appends
one JSON line to `<sweep dir>/jobs.jsonl` (overrides, per-stage status / key / metrics, read from
the job's `summary.json` and the stages' manifests); when the sweep ends it writes `sweep.md` and
`sweep.csv` next to it and prints the table. Single runs are left alone. Paths in `jobs.jsonl`
are relative to the sweep folder, like those of `summary.json`, so outputs/ can be moved.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from recipe_engine.files import JsonObject, atomic_write_text, file_lock
from recipe_engine.store.metric_text import metrics_text
from recipe_engine.store.records import (
    MANIFEST_FILE,
    SUMMARY_FILE,
    Manifest,
    RunSummary,
    StageMetrics,
    StageRow,
    relative_to,
)
from recipe_engine.store.stage_records import known_fields
from recipe_engine.tables import markdown_table

log = logging.getLogger("recipe_engine")

JOBS_FILE = "jobs.jsonl"
TABLE_MD = "sweep.md"
TABLE_CSV = "sweep.csv"


class SweepTable(Callback):
    """Hydra callback: `jobs.jsonl` line per job, `sweep.md` / `sweep.csv` per sweep."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.mode") != RunMode.MULTIRUN:
            return  # single runs have their own summary.json; nothing to tabulate
        # A broken table must never turn a trained job into a failed one: warn and go on.
        try:
            line = json.dumps(job_record(config, job_return).to_json(), default=str)
            append_line(sweep_dir_of(config) / JOBS_FILE, line)
        except Exception as error:  # noqa: BLE001
            log.warning("sweep table: could not record job: %s", error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
            jobs = read_jobs(sweep_dir / JOBS_FILE)
            if not jobs:
                return
            table = write_tables(sweep_dir, jobs)
        except Exception as error:  # noqa: BLE001
            log.warning("sweep table: could not write the table: %s", error)
            return
        print(table)
        print(f"sweep table: {sweep_dir / TABLE_MD} (also {TABLE_CSV}, {JOBS_FILE})")


def sweep_dir_of(config: DictConfig) -> Path:
    """The sweep folder as an absolute path.

    Derived from the job's absolute output folder (sweep dir + subdir) rather than
    `hydra.sweep.dir`, which may be relative while `hydra.job.chdir=true` moved the cwd.
    """
    output_dir = Path(str(config.hydra.runtime.output_dir))
    subdir = OmegaConf.select(config, "hydra.sweep.subdir")
    depth = len(Path(str(subdir)).parts) if subdir not in (None, "") else 0
    return output_dir.parents[depth - 1] if depth else output_dir


@dataclass(frozen=True)
class SweepStage:
    """One stage of a sweep job: its summary row and the numbers of its store manifest."""

    stage: str
    status: str  # trained | evaluated | cached
    key: str
    entry: str | None = None  # its store folder's name
    output: str | None = None  # its store folder, relative to the sweep folder
    steps: int | None = None
    train_loss: float | None = None  # the last logged
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    base_accuracy: float | None = None
    base_precision: str | None = None  # what eval_accuracy was measured on

    def eval_text(self) -> str:
        """As the run table writes it: "acc 93% (4-bit base), loss 0.092"."""
        metrics = StageMetrics(eval_loss=self.eval_loss, eval_accuracy=self.eval_accuracy)
        return metrics_text(metrics, self.base_precision)


@dataclass(frozen=True)
class SweepJob:
    """One job of a sweep, as a line of `jobs.jsonl` holds it."""

    job: int  # Hydra's job number
    overrides: list[str] = field(default_factory=list)
    status: str = "?"  # completed | failed
    output_dir: str | None = None  # the job's run folder, relative to the sweep folder
    finished: str | None = None
    pid: int | None = None  # the process that ran it
    stages: list[SweepStage] = field(default_factory=list)
    error: str | None = None  # a failed job's exception
    recipe: str | None = None  # from its summary.json (None: the job wrote none)

    def to_json(self) -> JsonObject:
        """The line `jobs.jsonl` holds: a job's error and recipe only where there are any."""
        data = dataclasses.asdict(self)
        return {k: v for k, v in data.items() if v is not None or k not in ("error", "recipe")}

    @classmethod
    def from_json(cls, data: JsonObject) -> SweepJob:
        stages = [SweepStage(**known_fields(SweepStage, s)) for s in data.get("stages", [])]
        fields = known_fields(cls, data) | {"job": int(data["job"]), "stages": stages}
        return cls(**fields)


def job_record(config: DictConfig, job_return: JobReturn) -> SweepJob:
    """One job: number, overrides, status and each stage's status, key and metrics."""
    output_dir = Path(str(config.hydra.runtime.output_dir))
    sweep_dir = sweep_dir_of(config)
    failed = job_return.status == JobStatus.FAILED
    job = SweepJob(
        job=int(config.hydra.job.num),
        overrides=list(job_return.overrides or []),
        status="failed" if failed else "completed",
        output_dir=relative_to(output_dir, sweep_dir),
        finished=time.strftime("%Y-%m-%d %H:%M:%S"),
        pid=os.getpid(),
        # `return_value` re-raises for failed jobs; the exception itself is in `_return_value`.
        error=repr(job_return._return_value) if failed else None,
    )
    if not (output_dir / SUMMARY_FILE).is_file():
        return job
    summary = RunSummary.load(output_dir)
    stages = [stage_record(row, output_dir, sweep_dir) for row in summary.stages]
    return dataclasses.replace(job, recipe=summary.recipe, stages=stages)


def stage_record(row: StageRow, run_dir: Path, sweep_dir: Path) -> SweepStage:
    """A summary.json stage row plus the numeric metrics of its store manifest; its store
    entry relative to `sweep_dir`, where jobs.jsonl lives."""
    output = row.output_path(run_dir)
    metrics, precision = StageMetrics(), None
    if (output / MANIFEST_FILE).is_file():
        manifest = Manifest.load(output, stage=row.stage)
        metrics, precision = manifest.metrics, manifest.base_precision
    losses = metrics.train_losses
    return SweepStage(
        stage=row.stage,
        status=row.status,
        key=row.key,
        entry=output.name,
        output=relative_to(output, sweep_dir),
        steps=metrics.steps,
        train_loss=losses[-1] if losses else None,
        eval_loss=metrics.eval_loss,
        eval_accuracy=metrics.eval_accuracy,
        base_accuracy=metrics.base_accuracy,
        base_precision=precision,
    )


def _lock(path: Path) -> FileLock:
    return file_lock(path.with_name(f".{path.name}.lock"))


def append_line(path: Path, line: str) -> None:
    """Append one line under a lock: joblib workers write the same file at once."""
    with _lock(path), open(path, "a", encoding="utf-8") as handle:
        handle.write(line.rstrip("\n") + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jobs(path: Path) -> list[SweepJob]:
    """The recorded jobs by number; a job recorded twice (a re-launched sweep) keeps its last."""
    if not path.is_file():
        return []
    with _lock(path):
        lines = path.read_text(encoding="utf-8").splitlines()
    return parse_jobs(lines)


def parse_jobs(lines: Sequence[str]) -> list[SweepJob]:
    """jobs.jsonl's lines as jobs by number; a line cut short (by a crash, or a write still in
    progress for a reader that takes no lock) is skipped, the other jobs still count."""
    jobs: dict[int, SweepJob] = {}
    for line in lines:
        try:
            job = SweepJob.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        jobs[job.job] = job
    return [jobs[n] for n in sorted(jobs)]


def varying_overrides(jobs: Sequence[SweepJob]) -> tuple[list[str], list[list[str]]]:
    """(overrides every job shares, per job the overrides that differ): the table shows the
    second so a sweep's columns are what was swept."""
    if len(jobs) < 2:
        return [], [list(j.overrides) for j in jobs]
    common = set.intersection(*(set(j.overrides) for j in jobs))
    shared = [o for o in jobs[0].overrides if o in common]
    return shared, [[o for o in j.overrides if o not in common] for j in jobs]


def stage_names(jobs: Sequence[SweepJob]) -> list[str]:
    names: list[str] = []
    for job in jobs:
        for stage in job.stages:
            if stage.stage not in names:
                names.append(stage.stage)
    return names


def table_rows(jobs: Sequence[SweepJob]) -> tuple[list[str], list[list[str]]]:
    """Headers and text rows of the markdown table (also what is printed): job, overrides,
    status, each stage's status and key, then each stage's evaluation."""
    names = stage_names(jobs)
    _, varying = varying_overrides(jobs)
    headers = ["job", "overrides", "status"]
    headers += [f"{n}" for n in names] + [f"{n} eval" for n in names]
    rows = []
    for job, overrides in zip(jobs, varying, strict=True):
        by_stage = {s.stage: s for s in job.stages}
        stages = [by_stage.get(name) for name in names]
        rows.append(
            [str(job.job), " ".join(overrides) or "-", job.status]
            + [f"{s.status} `{s.key}`" if s else "-" for s in stages]
            + [s.eval_text() if s else "-" for s in stages]
        )
    return headers, rows


def render_markdown(jobs: Sequence[SweepJob], title: str = "") -> str:
    headers, rows = table_rows(jobs)
    shared, _ = varying_overrides(jobs)
    lines = [f"# {title}", ""] if title else []
    if shared:
        lines += [f"Common overrides: `{' '.join(shared)}`", ""]
    lines += markdown_table(rows, header=headers)
    return "\n".join(lines)


# What sweep.csv shows of each stage, in its columns' order.
CSV_FIELDS = (
    "status",
    "key",
    "entry",
    "steps",
    "train_loss",
    "eval_loss",
    "eval_accuracy",
    "base_precision",
)


def write_csv(path: Path, jobs: Sequence[SweepJob]) -> None:
    """One row per job: overrides, and per stage status, key, store entry and raw metrics."""
    names = stage_names(jobs)
    headers = ["job", "status", "overrides"] + [f"{n}.{f}" for n in names for f in CSV_FIELDS]
    _, varying = varying_overrides(jobs)
    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=headers)
    writer.writeheader()
    for job, overrides in zip(jobs, varying, strict=True):
        row: dict[str, object] = {
            "job": job.job,
            "status": job.status,
            "overrides": " ".join(overrides),
        }
        for stage in job.stages:
            for f in CSV_FIELDS:
                row[f"{stage.stage}.{f}"] = getattr(stage, f)
        writer.writerow(row)
    atomic_write_text(path, handle.getvalue())


def write_tables(sweep_dir: Path, jobs: Sequence[SweepJob]) -> str:
    """Write sweep.md and sweep.csv; return the markdown table."""
    recipe = next((j.recipe for j in jobs if j.recipe), "")
    title = f"Sweep {recipe} {sweep_dir.name}: {len(jobs)} jobs"
    table = render_markdown(jobs, title=title)
    atomic_write_text(sweep_dir / TABLE_MD, table + "\n")
    write_csv(sweep_dir / TABLE_CSV, jobs)
    return table
