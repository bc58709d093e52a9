"""What preference training is judged by, measured on held-out judged rows: preference pairs
(prompt, chosen, rejected: DPO, ORPO) or unpaired feedback (prompt, completion, label: KTO).

- TRL's own evaluation of a preference stage (`DPOTrainer.evaluate`, `KTOTrainer.evaluate`):
  its implicit judgement beta * log(pi / pi_ref) with the stage's own reference (its starting
  weights), named as `capabilities.judged.TRL_METRICS` names it.
- For any model, one at a time (`answer_logps`): the summed log-probability of each judged
  answer given the prompt (chosen and rejected; or the one completion). From those, for every
  model on the same rows, against one common reference (the recipe's base), so that an SFT
  stage and the stage trained from it are judged by the same rule:
  - pairs: `pair_accuracy` (chosen more likely than rejected, no reference), the implicit
    judgement's accuracy and the mean log-ratio margin;
  - unpaired rows: `label_accuracy` (the completion's log-ratio against the base has the
    label's sign: above zero for a desirable completion, below for an undesirable one),
    `ranking_accuracy` (a desirable completion's log-ratio beats an undesirable one's, over
    every such couple of rows: DPO's accuracy without shared prompts), the mean
    log-ratio of each label and their margin.
- Greedy answers to the prompts: for pairs the `win_rate` (the chosen answer a win, the
  rejected a loss, anything else half); for unpaired rows `desirable_match` (exact match on the
  desirable rows) and `undesirable_match` (the undesirable completion given, lower is better).

`JUDGINGS` holds the rules of each kind of rows; `judging(rows)` picks by the rows' columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from recipe_engine.capabilities.judged import ACCURACY
from recipe_engine.run.evaluation import is_exact_match, message_text, prompt_text
from recipe_engine.trainers.kind import PREFERENCE_ROWS, UNPAIRED_ROWS

LogPs = list[tuple[float, ...]]  # per row: log p(answer | prompt) of each judged answer
Rows = Sequence[Mapping[str, Any]]


def answer_text(answer: Any) -> str:
    """A chosen / rejected / completion answer: a string, or assistant message(s)."""
    if isinstance(answer, str):
        return answer
    return "".join(message_text(m) for m in answer)


# --------------------------------------------------------------------------- pairs


def pair_metrics(logps: LogPs, reference: LogPs | None, rows: Rows = ()) -> dict[str, float]:
    """pair_accuracy, and against `reference` (the same pairs' log-probs under another model)
    the accuracy of the implicit judgement (`judged.ACCURACY`) and the mean log-ratio margin."""
    if not logps:
        return {}
    metrics = {"pair_accuracy": sum(c > r for c, r in logps) / len(logps)}
    if reference is None:
        return metrics
    margins = [(c - rc) - (r - rr) for (c, r), (rc, rr) in zip(logps, reference, strict=True)]
    metrics[ACCURACY] = sum(m > 0 for m in margins) / len(margins)
    metrics["logratio_margin"] = sum(margins) / len(margins)
    return metrics


def win_rate(answers: Sequence[str], rows: Rows) -> float:
    """Share of answers that are the chosen answer (exact match) rather than the rejected one;
    an answer that is neither counts half."""
    score = 0.0
    for answer, row in zip(answers, rows, strict=True):
        chosen = is_exact_match(answer, answer_text(row["chosen"]).strip())
        rejected = is_exact_match(answer, answer_text(row["rejected"]).strip())
        score += 1.0 if chosen else 0.0 if rejected else 0.5
    return score / len(rows) if rows else 0.0


# --------------------------------------------------------------------------- unpaired


def feedback_metrics(logps: LogPs, reference: LogPs | None, rows: Rows) -> dict[str, float]:
    """Against `reference` (the same rows' log-probs under another model): label_accuracy,
    ranking_accuracy, the mean log-ratio of the desirable and of the undesirable completions,
    and their margin. Without a reference there is nothing to judge a single completion by: {}."""
    if not logps or reference is None:
        return {}
    ratios = [c - rc for (c,), (rc,) in zip(logps, reference, strict=True)]
    labels = [bool(row["label"]) for row in rows]
    signed = [
        ratio > 0 if label else ratio < 0 for ratio, label in zip(ratios, labels, strict=True)
    ]
    metrics = {"label_accuracy": sum(signed) / len(signed)}
    desirable = [r for r, label in zip(ratios, labels, strict=True) if label]
    undesirable = [r for r, label in zip(ratios, labels, strict=True) if not label]
    if desirable:
        metrics["desirable_logratio"] = sum(desirable) / len(desirable)
    if undesirable:
        metrics["undesirable_logratio"] = sum(undesirable) / len(undesirable)
    if desirable and undesirable:
        metrics["logratio_margin"] = metrics["desirable_logratio"] - metrics["undesirable_logratio"]
        beaten = sum(d > u for d in desirable for u in undesirable)
        metrics["ranking_accuracy"] = beaten / (len(desirable) * len(undesirable))
    return metrics


def feedback_matches(answers: Sequence[str], rows: Rows) -> dict[str, float]:
    """desirable_match: the greedy answer is the desirable completion (exact match), over the
    desirable rows; undesirable_match: it is the undesirable completion, over those rows."""
    said: dict[bool, list[bool]] = {True: [], False: []}
    for answer, row in zip(answers, rows, strict=True):
        said[bool(row["label"])].append(is_exact_match(answer, answer_text(row["completion"])))
    return {
        f"{'desirable' if label else 'undesirable'}_match": sum(hits) / len(hits)
        for label, hits in said.items()
        if hits
    }


# --------------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Judging:
    """How one kind of judged rows is scored: the answers whose log-probabilities are
    measured, the metrics against a reference, and the greedy answers' metrics."""

    rows: str  # PREFERENCE_ROWS | UNPAIRED_ROWS (trainers.kind)
    answers: tuple[str, ...]
    against_reference: Callable[[LogPs, LogPs | None, Rows], dict[str, float]]
    greedy: Callable[[Sequence[str], Rows], dict[str, float]]
    count: str  # the key its row count is recorded under


JUDGINGS = {
    PREFERENCE_ROWS: Judging(
        PREFERENCE_ROWS,
        ("chosen", "rejected"),
        pair_metrics,
        lambda answers, rows: {"win_rate": win_rate(answers, rows)},
        count="pairs",
    ),
    UNPAIRED_ROWS: Judging(
        UNPAIRED_ROWS, ("completion",), feedback_metrics, feedback_matches, count="rows"
    ),
}


def is_judged_row(row: Mapping[str, Any]) -> bool:
    """A preference pair or a labelled completion: rows SFT's held-out loss does not apply to."""
    return ("chosen" in row and "rejected" in row) or "label" in row


def greedy_metrics(answers: Sequence[str], rows: Rows) -> dict[str, float]:
    """The greedy answers to judged rows, judged by their kind's rule ({}: not judged rows)."""
    rule = judging(rows)
    return rule.greedy(answers, rows) if rule is not None else {}


def judging(rows: Rows) -> Judging | None:
    """The rules for these rows (None: not judged rows: instruction rows, probes)."""
    if not rows:
        return None
    first = rows[0]
    if "label" in first and "completion" in first:
        return JUDGINGS[UNPAIRED_ROWS]
    if "chosen" in first and "rejected" in first:
        return JUDGINGS[PREFERENCE_ROWS]
    return None


# --------------------------------------------------------------------------- log-probs


def answer_logps(model: Any, processor: Any, rows: Rows) -> LogPs:
    """log p(answer | prompt) of each row's judged answers (`judging`), the prompt asked as
    generation asks it (`evaluation.prompt_text`) and each answer's tokens appended, as TRL
    tokenizes a prompt and its completion apart."""
    rule = judging(rows)
    if rule is None:
        return []
    model.eval()
    device = next(p.device for p in model.parameters() if p.device.type != "meta")
    with torch.no_grad():
        return [_row_logps(model, processor, row, rule.answers, device) for row in rows]


def _row_logps(
    model: Any, processor: Any, row: Mapping[str, Any], answers: tuple[str, ...], device: Any
) -> tuple[float, ...]:
    tokenizer = getattr(processor, "tokenizer", processor)
    text = prompt_text(processor, dict(row))
    if row.get("images"):
        prompt = processor(text=[text], images=[row["images"]], return_tensors="pt")
    else:
        prompt = tokenizer([text], return_tensors="pt", add_special_tokens=False)
    return tuple(
        _answer_logp(
            model, prompt, tokenizer(answer_text(row[k]), add_special_tokens=False), device
        )
        for k in answers
    )


def _answer_logp(model: Any, prompt: Mapping[str, Any], answer: Any, device: torch.device) -> float:
    """The summed log-probability of `answer`'s tokens right after `prompt`."""
    prompt_ids = prompt["input_ids"]
    answer_ids = torch.tensor([answer["input_ids"]], dtype=prompt_ids.dtype)
    length = prompt_ids.shape[1]
    inputs = {"input_ids": torch.cat([prompt_ids, answer_ids], dim=1)}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    for key, value in prompt.items():  # pixel values, image grids; per-token ids padded
        if key in inputs:
            continue
        per_token = value.dim() == 2 and value.shape[1] == length and key.endswith("_ids")
        inputs[key] = torch.cat([value, torch.zeros_like(answer_ids)], 1) if per_token else value
    inputs = {k: v.to(device) for k, v in inputs.items()}
    logits = model(**inputs).logits[0, length - 1 : -1].float()
    targets = inputs["input_ids"][0, length:]
    return float(logits.log_softmax(-1).gather(1, targets[:, None]).sum())
