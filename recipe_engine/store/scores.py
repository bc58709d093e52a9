"""What `evaluate` writes and `report` renders, as data: a comparison's probes, measurements and
records (`Probe`, `ModelMetrics`, `Measured`, `Scored`), the lm-evaluation-harness' settings and
scores. No torch, model or data library is imported here, so `report` reads these without
loading any. Each record converts to its JSON (`to_json`) only where it is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe_engine.resolve.converters import TrlRow
from recipe_engine.store.records import Manifest

DEFAULT_LIMIT = 50  # documents per task: a fixed limit keeps runs comparable and short
BATCH_SIZE = 8

Stage = tuple[str, Path, Manifest]  # name, output folder, manifest
# A JSON object as a record file holds it (written with json.dumps): the edge to the disk.
JsonRecord = dict[str, Any]

# The EvalConfig fields that decide how answers are generated (and so an evaluation's key).
GENERATION_KEYS = ("max_new_tokens", "batch_size", "do_sample", "temperature", "top_p")


@dataclass(frozen=True)
class Generation:
    """How answers are generated (the `eval.*` generation keys, and the sampling seed)."""

    max_new_tokens: int = 8
    batch_size: int = 16
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], seed: int) -> Generation:
        """The generation keys of eval settings (EvalConfig's keys; the absent ones default)."""
        return cls(**{key: settings[key] for key in GENERATION_KEYS if key in settings}, seed=seed)

    def settings(self) -> list[tuple[str, Any]]:
        """The generation keys and their values, in EvalConfig's order (as reports list them)."""
        return [(key, getattr(self, key)) for key in GENERATION_KEYS]


@dataclass(frozen=True)
class Probe:
    """One question a comparison asks every model: its data row in the shape training saw (the
    TRL columns: a conversation, prompt and completion, a pair, a labelled completion; and its
    `images`), the answer expected (None: a bare prompt), and what the records show of it."""

    row: TrlRow
    reference: str | None
    input: str  # the prompt as text
    image: str  # the image files, `;`-separated ("(embedded)": an image given as bytes)


@dataclass(frozen=True)
class TaskMetrics:
    """Answers against references: the share equal after stripping (`exact_match`) and the share
    containing the reference in any case (`contains`)."""

    exact_match: float
    contains: float


@dataclass(frozen=True)
class JudgedScores:
    """One model's metrics on held-out judged rows (`run.preference_scores`' rule for their
    kind): the reward and greedy-answer metrics, and how many rows were judged."""

    judged: str  # the kind of rows: PREFERENCE_ROWS | UNPAIRED_ROWS (trainers.kind)
    values: dict[str, float]  # metric name -> value (which ones: the kind's rule)
    count: int
    count_key: str  # what the records call the count: "pairs" | "rows"

    def to_json(self) -> JsonRecord:
        return {**self.values, self.count_key: self.count, "judged": self.judged}


@dataclass(frozen=True)
class JudgedAnswers:
    """One model on held-out judged rows: each row's judged answers' log-probabilities and its
    greedy answer."""

    logps: list[tuple[float, ...]]
    answers: list[str]


@dataclass(frozen=True)
class Measurement:
    """One model's pass over what a run asks (`run.measuring`): its answers to the probes, its
    held-out loss on them, its judged rows' log-probabilities and answers; what it was measured
    on (`precision`: "full", or "4-bit" for a stage measured on its quantized training base);
    and `asked`, the hash of the probes, rows, generation and loss settings it answered (a
    record made for other ones is not used)."""

    asked: str
    precision: str
    answers: list[str]
    eval_loss: float | None = None  # None with loss_measured: TRL's loss was not a number
    loss_measured: bool = False
    judged: JudgedAnswers | None = None

    def to_json(self) -> JsonRecord:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Measurement:
        judged = record.get("judged")
        return cls(
            asked=record["asked"],
            precision=record["precision"],
            answers=list(record["answers"]),
            eval_loss=record.get("eval_loss"),
            loss_measured=bool(record.get("loss_measured")),
            judged=JudgedAnswers([tuple(row) for row in judged["logps"]], list(judged["answers"]))
            if judged
            else None,
        )


@dataclass(frozen=True)
class RunLabels:
    """What a model was measured on in a comparison (`base_precision`: the full-precision
    base, or a stage's quantized training base where the run measured it in memory) beside the
    accuracy and loss the run measured itself, as text labelled with that run's base."""

    run_accuracy: str | None
    run_loss: str | None
    base_precision: str = "full"


@dataclass
class ModelMetrics:
    """One model's metrics in a comparison: `n` probes; task metrics where they have references;
    the stage's own held-out loss where they are instruction rows with references; its judged
    rows' metrics where the run has a preference stage; the labels `evaluate.scoring` adds."""

    n: int
    task: TaskMetrics | None = None
    eval_loss: float | None = None  # None with loss_measured: TRL's loss was not a number
    loss_measured: bool = False
    preference: JudgedScores | None = None
    labels: RunLabels | None = None
    measured_on: str = "full"  # the base it was measured on (Measurement.precision)

    def to_json(self) -> JsonRecord:
        """As `<stem>_metrics.json` holds it (a key only where it was measured)."""
        record: JsonRecord = {"n": self.n}
        if self.task is not None:
            record |= asdict(self.task)
        if self.loss_measured:
            record["eval_loss"] = self.eval_loss
        if self.preference is not None:
            record["preference"] = self.preference.to_json()
        if self.labels is not None:
            record["base_precision"] = self.labels.base_precision
            record["run_accuracy"] = self.labels.run_accuracy
            record["run_loss"] = self.labels.run_loss
        return record


def metrics_json(metrics: Mapping[str, ModelMetrics]) -> dict[str, JsonRecord]:
    """Every model's metrics as the metrics file holds them: model -> its record."""
    return {name: values.to_json() for name, values in metrics.items()}


@dataclass
class Measured:
    """What a comparison measured: every model's answers to the probes and its metrics."""

    run_dir: Path
    recipe: str
    stages: list[Stage]
    probes: list[Probe]
    source: str  # where the probes come from, in words
    outputs: dict[str, list[str]]  # model -> its answers
    metrics: dict[str, ModelMetrics]  # model -> its metrics
    generation: Generation  # how every model answered (with the seed)

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
        """The records by their name here: csv, jsonl, metrics_path."""
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

    def to_json(self) -> JsonRecord:
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
