"""What `evaluate` writes and `report` renders, as data: a comparison's measurements and
records (`Measured`, `Scored`), the lm-evaluation-harness' settings and scores. No torch, model
or data library is imported here, so `report` reads these without loading any."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.store.records import Manifest

DEFAULT_LIMIT = 50  # documents per task: a fixed limit keeps runs comparable and short
BATCH_SIZE = 8

Stage = tuple[str, Path, Manifest]  # name, output folder, manifest


@dataclass
class Measured:
    """What a comparison measured: every model's answers to the probes and its metrics."""

    run_dir: Path
    recipe: str
    stages: list[Stage]
    rows: list[dict[str, Any]]  # the probes: input, image, reference
    source: str  # where the probes come from, in words
    outputs: dict[str, list[str]]  # model -> its answers
    metrics: dict[str, dict[str, Any]]  # model -> n, exact_match, contains, eval_loss
    seed: int
    generation: dict[str, Any]

    @property
    def root(self) -> Stage:
        return root_stage(self.stages)


def root_stage(stages: list[Stage]) -> Stage:
    """The run's root stage (no parent); with `only=[...]` runs, the first stage listed."""
    return next((s for s in stages if not s[2].parent), stages[0])


@dataclass(frozen=True)
class Scored:
    """What a comparison measured and the records it wrote (their file names share `stem`)."""

    measured: Measured
    stem: str
    csv: Path
    jsonl: Path
    metrics_path: Path

    def paths(self) -> dict[str, Path]:
        return {"csv": self.csv, "jsonl": self.jsonl, "metrics_path": self.metrics_path}


@dataclass(frozen=True)
class HarnessSettings:
    """What `compare tasks=[...]` asks the harness: task names, documents per task (None: all),
    a folder of the user's own task YAMLs."""

    tasks: tuple[str, ...]
    limit: int | None = DEFAULT_LIMIT
    include_path: Path | None = None
    batch_size: int = BATCH_SIZE


@dataclass(frozen=True)
class TaskScore:
    """One model's score on one task metric (`value` None: not measured, `note` says why)."""

    model: str
    task: str
    metric: str  # the harness' key, `<metric>,<filter>` (e.g. exact_match,first_number)
    value: float | None
    n: int  # documents scored
    task_hash: str  # sha256 of the task's resolved config, data files by their content
    note: str = ""


@dataclass(frozen=True)
class HarnessResult:
    """Every model's scores on every task, with the harness version that measured them."""

    version: str
    settings: HarnessSettings
    scores: tuple[TaskScore, ...]
    chat_template: dict[str, bool] = field(default_factory=dict)  # model -> template applied

    def to_json(self) -> dict[str, Any]:
        settings = asdict(self.settings)
        settings["include_path"] = self.settings.include_path and str(self.settings.include_path)
        return {
            "lm_eval_version": self.version,
            "settings": settings,
            "chat_template": self.chat_template,
            "scores": [asdict(score) for score in self.scores],
        }


@dataclass(frozen=True)
class HarnessScored:
    """The harness' scores and the records written beside the comparison's (same stem)."""

    result: HarnessResult
    csv: Path
    json: Path
