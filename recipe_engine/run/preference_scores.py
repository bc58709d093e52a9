"""What preference training is judged by, measured on held-out pairs (prompt, chosen, rejected).

- TRL's own evaluation of a preference stage (`DPOTrainer.evaluate`): the implicit reward
  beta * log(pi / pi_ref) of chosen against rejected, with the stage's own reference (its
  starting weights): `reward_accuracy` (share of pairs where chosen's reward is higher) and
  `reward_margin`.
- For any model, one at a time (`answer_logps`): the summed log-probability of the chosen and
  of the rejected answer given the prompt. From those, for every model on the same pairs:
  `pair_accuracy` (chosen more likely than rejected) and, against one common reference (the
  recipe's base), `reward_accuracy` and the mean log-ratio margin: so an SFT stage and the
  DPO stage trained from it are judged by the same rule.
- `win_rate`: greedy answers to the pairs' prompts, a win where the answer is the chosen one
  (exact match), a loss where it is the rejected one, half where it is neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from recipe_engine.run.evaluation import is_exact_match, message_text, prompt_text

# TRL's evaluation metrics of a preference stage, as the manifest names them.
TRL_METRICS = {
    "eval_rewards/accuracies": "reward_accuracy",
    "eval_rewards/margins": "reward_margin",
    "eval_rewards/chosen": "reward_chosen",
    "eval_rewards/rejected": "reward_rejected",
}

LogPs = list[tuple[float, float]]  # per pair: (log p(chosen | prompt), log p(rejected | prompt))


def trl_metrics(evaluated: Mapping[str, Any]) -> dict[str, float]:
    """The reward metrics of a preference trainer's `evaluate()` ({} for SFT's)."""
    return {name: float(evaluated[key]) for key, name in TRL_METRICS.items() if key in evaluated}


def answer_text(answer: Any) -> str:
    """A chosen / rejected answer: a string, or assistant message(s)."""
    if isinstance(answer, str):
        return answer
    return "".join(message_text(m) for m in answer)


def win_rate(answers: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of answers that are the chosen answer (exact match) rather than the rejected one;
    an answer that is neither counts half."""
    score = 0.0
    for answer, row in zip(answers, rows, strict=True):
        chosen = is_exact_match(answer, answer_text(row["chosen"]).strip())
        rejected = is_exact_match(answer, answer_text(row["rejected"]).strip())
        score += 1.0 if chosen else 0.0 if rejected else 0.5
    return score / len(rows) if rows else 0.0


def answer_logps(model: Any, processor: Any, rows: Sequence[Mapping[str, Any]]) -> LogPs:
    """log p(chosen | prompt) and log p(rejected | prompt) per pair, the prompt asked as
    generation asks it (`evaluation.prompt_text`) and each answer's tokens appended, as TRL
    tokenizes a prompt and its completion apart."""
    model.eval()
    device = next(p.device for p in model.parameters() if p.device.type != "meta")
    with torch.no_grad():
        return [_pair_logps(model, processor, row, device) for row in rows]


def _pair_logps(
    model: Any, processor: Any, row: Mapping[str, Any], device: torch.device
) -> tuple[float, float]:
    tokenizer = getattr(processor, "tokenizer", processor)
    text = prompt_text(processor, dict(row))
    if row.get("images"):
        prompt = processor(text=[text], images=[row["images"]], return_tensors="pt")
    else:
        prompt = tokenizer([text], return_tensors="pt", add_special_tokens=False)
    chosen, rejected = (
        _answer_logp(
            model, prompt, tokenizer(answer_text(row[k]), add_special_tokens=False), device
        )
        for k in ("chosen", "rejected")
    )
    return chosen, rejected


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


def pair_metrics(logps: LogPs, reference: LogPs | None) -> dict[str, float]:
    """pair_accuracy, and against `reference` (the same pairs' log-probs under another model)
    reward_accuracy and the mean log-ratio margin."""
    if not logps:
        return {}
    metrics = {"pair_accuracy": sum(c > r for c, r in logps) / len(logps)}
    if reference is None:
        return metrics
    margins = [(c - rc) - (r - rr) for (c, r), (rc, rr) in zip(logps, reference, strict=True)]
    metrics["reward_accuracy"] = sum(m > 0 for m in margins) / len(margins)
    metrics["logratio_margin"] = sum(margins) / len(margins)
    return metrics
