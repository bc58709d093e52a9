"""What preference training is judged by: on pairs, reward accuracy against a common reference,
pair accuracy and win rate; on unpaired feedback, label and rank accuracy against it and the
greedy answers' matches; from log-probabilities measured on a real model."""

from __future__ import annotations

import math

import pytest

from recipe_engine.capabilities.judged import trl_metrics
from recipe_engine.resolve.tiny.models import build_tiny_model
from recipe_engine.run.preference_scores import (
    JUDGINGS,
    answer_logps,
    feedback_matches,
    feedback_metrics,
    judging,
    pair_metrics,
    win_rate,
)


def test_rewards_are_judged_against_the_reference_log_probs():
    stage = [(-1.0, -3.0), (-2.0, -1.0), (-5.0, -6.0)]
    base = [(-4.0, -2.0), (-2.0, -2.0), (-5.0, -6.0)]
    judged = pair_metrics(stage, base)
    assert judged["pair_accuracy"] == pytest.approx(2 / 3)  # chosen more likely: pairs 1, 3
    # margins: (3 - -1) = 4, (0 - 1) = -1, (0 - 0) = 0 -> one of three beats the reference
    assert judged["reward_accuracy"] == pytest.approx(1 / 3)
    assert judged["logratio_margin"] == pytest.approx(1.0)
    assert "reward_accuracy" not in pair_metrics(stage, None)


def test_the_win_rate_counts_chosen_as_a_win_rejected_as_a_loss_anything_else_half():
    rows = [{"chosen": "It is 7.", "rejected": "7"}] * 3
    assert win_rate(["It is 7.", "7", "It is 8."], rows) == pytest.approx((1 + 0 + 0.5) / 3)
    messages = [{"chosen": [{"role": "assistant", "content": "It is 7."}], "rejected": "7"}]
    assert win_rate(["It is 7."], messages) == 1.0


def test_trls_reward_metrics_are_named_as_the_manifest_names_them():
    evaluated = {"eval_loss": 0.4, "eval_rewards/accuracies": 0.75, "eval_rewards/margins": 1.5}
    assert trl_metrics(evaluated) == {"reward_accuracy": 0.75, "reward_margin": 1.5}
    assert trl_metrics({"eval_loss": 0.4}) == {}  # an SFT stage's evaluation
    kto = {"eval_rewards/chosen": 0.5, "eval_rewards/rejected": -0.2, "eval_kl": 1.25}
    assert trl_metrics(kto) == {"reward_chosen": 0.5, "reward_rejected": -0.2, "kl": 1.25}


UNPAIRED = [
    {"prompt": "3 + 4?", "completion": "It is 7.", "label": True},
    {"prompt": "3 + 4?", "completion": "It is 8.", "label": False},
    {"prompt": "1 + 1?", "completion": "It is 2.", "label": True},
    {"prompt": "1 + 1?", "completion": "2", "label": False},
]


def test_unpaired_rows_are_judged_by_the_sign_and_rank_of_their_log_ratio_to_the_reference():
    stage = [(-1.0,), (-2.0,), (-3.0,), (-9.0,)]
    base = [(-4.0,), (-5.0,), (-2.0,), (-8.0,)]
    # log-ratios: +3 (desirable), +3 (undesirable), -1 (desirable), -1 (undesirable)
    judged = feedback_metrics(stage, base, UNPAIRED)
    assert judged["label_accuracy"] == pytest.approx(2 / 4)  # rows 1 and 4 have their sign
    # desirable {3, -1} over undesirable {3, -1}: only 3 > -1 of the four couples
    assert judged["ranking_accuracy"] == pytest.approx(1 / 4)
    assert judged["desirable_logratio"] == judged["undesirable_logratio"] == 1.0
    assert judged["logratio_margin"] == 0.0
    assert feedback_metrics(stage, None, UNPAIRED) == {}  # nothing to judge one answer by


def test_greedy_answers_to_unpaired_rows_count_the_desirable_and_the_undesirable_given():
    answers = ["It is 7.", "It is 8.", "It is 3.", "It is 2."]
    assert feedback_matches(answers, UNPAIRED) == {
        "desirable_match": 0.5,  # row 1 yes, row 3 no
        "undesirable_match": 0.5,  # row 2 gave the undesirable completion, row 4 not
    }


def test_the_rows_columns_pick_the_rule():
    assert judging(UNPAIRED) is JUDGINGS["unpaired"]
    assert judging([{"prompt": "p", "chosen": "a", "rejected": "b"}]) is JUDGINGS["preference"]
    assert judging([{"prompt": "p", "completion": "a"}]) is None  # instruction rows


def test_answer_log_probs_sum_the_answer_tokens_after_the_prompt():
    """On a real model: finite, and an answer's log-probability is its first token's plus the
    rest's (the prompt is the same, so a longer answer with the same first tokens is less
    likely)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model("tiny-qwen2")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [{"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "7 7 7"}]
    [(chosen, rejected)] = answer_logps(model, tokenizer, rows)
    assert math.isfinite(chosen) and chosen < 0
    assert rejected < chosen
    # Unpaired rows: the one completion, as the pair's chosen answer was measured.
    judged = {"prompt": "What is 3 + 4?", "completion": "7", "label": True}
    [(alone,)] = answer_logps(model, tokenizer, [judged])
    assert alone == pytest.approx(chosen)
