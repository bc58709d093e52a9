"""One pass over a model, for everything a run measures of it: its answers to the run's probes
(the root stage's held-out rows), its held-out loss on them, and, where the run has a preference
stage, its log-probabilities of that stage's held-out judged answers and its greedy answers to
them. A run makes this pass once per model: each stage on its trained model while it is still
in memory (the root stage on the untrained base too), written into the run folder
(`measured/<model>.json`); the run's comparison is assembled from those records
(`evaluate.probing`), which measures, with the same function, only a model the run did not
(a stage reused from the store) and every model of a `compare` asked later.

What is asked is decided once, from the rows (`asked_of`): the same probes and judged rows, so a
record says by its `asked` hash whether it answers what a comparison asks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_engine.files import atomic_write_text
from recipe_engine.hashing import canonical_hash
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.resolve.converters import TrlRow
from recipe_engine.resolve.row_shapes import TRL_COLUMNS, asks_question, row_shape
from recipe_engine.run import evaluation
from recipe_engine.run.held_out_loss import LossSettings, held_out_loss, loss_settings
from recipe_engine.run.preference_scores import answer_logps, is_judged_row, judging
from recipe_engine.store.scores import Generation, JudgedAnswers, Measurement, Probe
from recipe_engine.trainers import TRAINERS

MEASURED = "measured"  # the run folder's folder of Measurement records
BASE = "base"  # the untrained base's name in a comparison (unless a stage has that name)
# The columns a probe keeps of its row: the shape training saw.
PROBE_COLUMNS = TRL_COLUMNS[:-1]  # all but `images`


@dataclass(frozen=True)
class Asked:
    """What every model of a run is asked: the probes, and the held-out judged rows (preference
    pairs or unpaired feedback) of the run's preference stage (None: it has none)."""

    probes: list[Probe]
    judged: list[TrlRow] | None = None

    def identity(self, generation: Generation, loss: LossSettings | None) -> str:
        """The hash a record of this pass carries: the probes' and judged rows' text, how
        answers are generated and the held-out loss settings."""
        probes = [(p.input, p.image, p.reference) for p in self.probes]
        judged = _texts(self.judged or [])
        return canonical_hash(
            {"probes": probes, "judged": judged, "generation": asdict(generation), "loss": loss}
        )

    def sft_probes(self) -> bool:
        """Whether the probes are instruction rows with references: a held-out loss applies."""
        references = [p for p in self.probes if p.reference is not None]
        rows = [p.row for p in self.probes]
        return bool(rows) and len(references) == len(rows) and not is_judged_row(rows[0])


def asked_of(probe_rows: Any, judged_rows: Any, limit: int | None) -> Asked:
    """The probes of held-out rows (the desirable ones of unpaired feedback, `limit` at most)
    and the judged rows (`limit` at most; None: none)."""
    probes = probes_of(probe_rows)
    if limit is not None:
        probes = probes[: int(limit)]
    judged = None
    if judged_rows is not None:
        count = len(judged_rows) if limit is None else min(int(limit), len(judged_rows))
        judged = [dict(judged_rows[i]) for i in range(count)]
    return Asked(probes, judged)


@dataclass(frozen=True)
class Questions:
    """What a pass asks (`asked`) and how a model answers it: generating with `generation`."""

    asked: Asked
    generation: Generation

    def identity(self, loss: LossSettings | None) -> str:
        return self.asked.identity(self.generation, loss)


@dataclass(frozen=True)
class RunAsks:
    """What a planned run asks every model, decided from its plan: the root stage's held-out
    rows as probes, its last preference stage's held-out rows as judged rows, answered with its
    eval settings; `root` is the stage whose rows the probes are."""

    questions: Questions
    root: StagePlan

    def loss(self, stage: StagePlan) -> LossSettings:
        """The held-out loss settings a stage's pass uses: its own, or, for a preference stage
        (no SFT loss of its own) and for the base, the root stage's."""
        judged = TRAINERS[stage.config.trainer].judged if stage is not self.root else False
        return loss_settings((self.root if judged else stage).trainer)


def run_asks(plan: RecipePlan) -> RunAsks:
    """What the run asks every model (`RunAsks`), from the rows the plan read."""
    stages = [plan.stages[name] for name in plan.graph.order]
    trained = [stage for stage in stages if not stage.evaluate_only] or stages
    root = next((stage for stage in trained if stage.parent is None), trained[0])
    preference = [s for s in trained if TRAINERS[s.config.trainer].judged]
    judged = preference[-1].data.splits().eval if preference else None
    settings = plan.config.eval
    asked = asked_of(root.data.splits().eval or [], judged, settings.max_samples)
    generation = evaluation.generation_settings(settings, plan.config.seed)
    return RunAsks(Questions(asked, generation), root)


def answers_to(rows: Any, measurement: Measurement, asked: Asked) -> list[str] | None:
    """The pass's answers to `rows` where `rows` are what it answered (the probes, or the
    judged rows), else None (the rows must be asked on their own)."""
    rows = [dict(rows[i]) for i in range(len(rows))]
    if _texts(rows) == _texts([probe.row for probe in asked.probes]):
        return measurement.answers
    if measurement.judged is not None and _texts(rows) == _texts(asked.judged or []):
        return measurement.judged.answers
    return None


def _texts(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What tells rows apart: their text columns and how many images each has."""
    return [
        {key: row.get(key) for key in PROBE_COLUMNS} | {"images": len(row.get("images") or [])}
        for row in rows
    ]


def probes_of(rows: Any) -> list[Probe]:
    """The rows as probes; of unpaired feedback only the desirable rows, whose completion is an
    answer to give (the undesirable ones are judged with the rest); none of rows that ask
    nothing (language-modeling text: no question, no answer to expect)."""
    return [
        _probe(row) for row in rows if evaluation.expects_its_answer(row) and asks_question(row)
    ]


def _probe(row: Mapping[str, Any]) -> Probe:
    """A probe keeps its row's own shape (conversation, prompt and completion, a pair, a
    labelled completion), so the models are asked exactly what training taught them to
    answer."""
    asked: TrlRow = {key: row[key] for key in PROBE_COLUMNS if key in row}
    asked["images"] = list(row.get("images") or [])
    return described(asked, reference=evaluation.reference_text(asked).strip())


def described(row: TrlRow, reference: str | None) -> Probe:
    """The probe of a row, with the CSV's `input` (prompt text) and `image` (file paths)."""
    question = row_shape(row).asked.question(row)
    if isinstance(question, str):
        text = question
    elif len(question) == 1:
        text = evaluation.message_text(question[0])
    else:
        text = "\n".join(f"{m['role']}: {evaluation.message_text(m)}" for m in question)
    # Images from files keep their path; images that came as bytes (hub data) have none.
    image = ";".join(getattr(im, "filename", "") or "(embedded)" for im in row["images"])
    return Probe(row, reference, text, image)


def measure_model(
    model: Any, processor: Any, questions: Questions, loss: LossSettings, precision: str = "full"
) -> Measurement:
    """The model's one pass over the questions: its answers to the probes (generated once), its
    held-out loss on them with the stage's `loss` settings where they are instruction rows,
    and its judged rows' log-probabilities and answers. Nothing of the model is trained or
    kept: its weights are left as they are (a trainer built to measure the loss would cast a
    k-bit model's trainable weights, so none is left trainable)."""
    model.requires_grad_(False)
    asked, generation = questions.asked, questions.generation
    rows = [probe.row for probe in asked.probes]
    answers = evaluation.generate_answers(model, processor, rows, generation)
    eval_loss, measured = None, False
    if asked.sft_probes():
        value = held_out_loss(model, processor, rows, loss)
        eval_loss, measured = (None if math.isnan(value) else value), True
    judged = None
    if asked.judged and judging(asked.judged) is not None:
        judged = measure_judged(model, processor, asked.judged, generation)
    return Measurement(questions.identity(loss), precision, answers, eval_loss, measured, judged)


def measure_judged(
    model: Any, processor: Any, rows: Sequence[TrlRow], generation: Generation
) -> JudgedAnswers:
    """A model on judged rows: each row's judged answers' log-probabilities, its greedy
    answer to each."""
    logps = answer_logps(model, processor, rows)
    answers = evaluation.generate_answers(model, processor, rows, generation)
    return JudgedAnswers(logps, answers)


def base_name_of(stages: Sequence[str]) -> str:
    """What a comparison calls the untrained base: `base`, unless a stage is named so."""
    return BASE if BASE not in set(stages) else "base_model"


def write_measurement(run_dir: Path, model: str, measurement: Measurement) -> Path:
    path = run_dir / MEASURED / f"{model}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(measurement.to_json(), indent=2) + "\n")
    return path


def read_measurement(run_dir: Path, model: str, asked: str) -> Measurement | None:
    """The run's record of `model`'s pass, if it answered what `asked` hashes (else None)."""
    path = run_dir / MEASURED / f"{model}.json"
    if not path.is_file():
        return None
    try:
        measurement = Measurement.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):  # a record cut short: measured again
        return None
    return measurement if measurement.asked == asked else None
