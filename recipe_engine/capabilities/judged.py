"""Judged answers: what a preference kind (DPO, ORPO on pairs; KTO on unpaired feedback) is
measured by, and how it is shown, in one place.

TRL's preference trainers score an answer by the policy's implicit reward, beta * log(pi /
pi_ref): their evaluation logs `eval_rewards/*` (the engine records them by `TRL_METRICS`'
names) and their training logs `rewards/*` (the web view draws the accuracy and margin). The
engine judges every model of a comparison on the same held-out rows against one common
reference, the base (`run.preference_scores` measures, `evaluate` collects): the metrics of
pairs and of unpaired rows are named here (`PAIRS`, `UNPAIRED`: their columns, the rule in
words and the headline an experiment's answer compares recipes by), as is the short form a
run's table gives a stage (`summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.capabilities import NOTHING, CapabilityPlan, InputRef, StageFacts

# TRL's evaluation metrics of a preference stage, as the manifest names them.
TRL_METRICS = {
    "eval_rewards/accuracies": "reward_accuracy",
    "eval_rewards/margins": "reward_margin",
    "eval_rewards/chosen": "reward_chosen",
    "eval_rewards/rejected": "reward_rejected",
    "eval_kl": "kl",  # KTO's estimate of KL(policy || reference) on mismatched pairs
}
# What TRL's preference trainers log while they train, drawn with these labels.
TRAINING_CURVES = {
    "rewards/accuracies": "reward accuracy (training batches)",
    "rewards/margins": "reward margin (training batches)",
}
ACCURACY = "reward_accuracy"  # chosen's implicit reward above rejected's, against a reference
MARGIN = "reward_margin"


@dataclass(frozen=True)
class JudgedView:
    """How one kind of judged rows is shown: its section, columns, rule and answer line."""

    title: str  # the section's name: "preference pairs"
    columns: tuple[str, ...]
    cells: Callable[[Mapping[str, Any]], list[str]]  # one model's metrics -> its cells
    rule: str  # how the metrics are computed, in words
    headline: str  # the metric the answer line compares recipes by
    headline_words: str  # ... as the answer line names it
    count: str  # the key holding how many rows were judged
    unit: str  # what those rows are called


def _percent(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


PAIRS = JudgedView(
    title="preference pairs",
    columns=("model", "pairs", "reward acc (vs base)", "log-ratio margin", "pair acc", "win rate"),
    cells=lambda v: [
        str(v.get("pairs", "-")),
        _percent(v.get(ACCURACY)),
        _number(v.get("logratio_margin")),
        _percent(v.get("pair_accuracy")),
        _percent(v.get("win_rate")),
    ],
    rule="reward: log p(answer | prompt) - log p_base(answer | prompt); reward acc: share of "
    "pairs where the chosen answer's reward beats the rejected one's; pair acc: chosen more "
    "likely than rejected; win rate: greedy answer = chosen (1), = rejected (0), neither (1/2)",
    headline=ACCURACY,
    headline_words="held-out reward accuracy",
    count="pairs",
    unit="pairs",
)
UNPAIRED = JudgedView(
    title="unpaired feedback",
    columns=(
        "model",
        "rows",
        "label acc (vs base)",
        "rank acc (vs base)",
        "log-ratio margin",
        "desirable exact",
        "undesirable given",
    ),
    cells=lambda v: [
        str(v.get("rows", "-")),
        _percent(v.get("label_accuracy")),
        _percent(v.get("ranking_accuracy")),
        _number(v.get("logratio_margin")),
        _percent(v.get("desirable_match")),
        _percent(v.get("undesirable_match")),
    ],
    rule="log-ratio: log p(completion | prompt) - log p_base(completion | prompt); label acc: "
    "share of rows whose log-ratio has the label's sign (desirable above 0, undesirable "
    "below); rank acc: share of (desirable, undesirable) row pairs where the desirable "
    "log-ratio is higher; log-ratio margin: mean desirable minus mean undesirable; "
    "desirable exact: greedy answer = the desirable completion, over those rows; "
    "undesirable given: greedy answer = the undesirable completion, over those rows",
    headline="label_accuracy",
    headline_words="held-out label accuracy",
    count="rows",
    unit="rows",
)


def trl_metrics(evaluated: Mapping[str, Any]) -> dict[str, float]:
    """The implicit-reward metrics of a preference trainer's `evaluate()` ({} for SFT's)."""
    return {name: float(evaluated[key]) for key, name in TRL_METRICS.items() if key in evaluated}


def summary(metrics: Mapping[str, float] | None) -> str | None:
    """A stage's held-out judged rows in a run's table: its accuracy, else (KTO) its margin."""
    if metrics and ACCURACY in metrics:
        return f"reward acc {metrics[ACCURACY]:.0%}"
    if metrics and MARGIN in metrics:
        return f"reward margin {metrics[MARGIN]:+.2f}"
    return None


@dataclass(frozen=True)
class Judged:
    """The capability: a kind whose stages are judged on their answers; what it adds to a
    stage is what the web view draws of its training logs."""

    name: str = "judged"
    sections: tuple[str, ...] = ()

    def check_config(
        self, stage: str, config: Mapping[str, Any], kind: str, having: Sequence[str]
    ) -> None:
        return None

    def inputs(self, stage: str, config: Mapping[str, Any]) -> dict[str, InputRef]:
        return {}

    def plan(self, facts: StageFacts) -> CapabilityPlan:
        return NOTHING

    def curves(self, logged: Sequence[str]) -> list[tuple[str, str]]:
        return [(label, key) for key, label in TRAINING_CURVES.items() if key in logged]

    def code_from_elsewhere(self, setting: str, value: Any, root: Path) -> str | None:
        return None  # it owns no settings


JUDGED = Judged()
