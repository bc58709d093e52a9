"""An online stage's page draws its rewards: the mean reward, each reward's mean under its name
and the completions' mean length, read from the records TRL's GRPOTrainer logs (these lines
are as a GRPO stage of r9-vlm-grpo wrote them to its metrics.jsonl, shortened)."""

from __future__ import annotations

import json

from recipe_engine.ui.runs import StageView
from recipe_engine.ui.stage_detail import stage_curves

LOGGED = [
    {"step": 1, "loss": 0.0, "completions/mean_length": 3.0, "rewards/exact_match/mean": 1.0,
     "rewards/exact_match/std": 0.0, "reward": 1.0, "reward_std": 0.0},
    {"step": 4, "loss": -2.5e-09, "completions/mean_length": 3.0,
     "rewards/exact_match/mean": 0.708, "rewards/format/mean": 0.5, "reward": 0.9},
    {"step": 8, "loss": 0.01, "completions/mean_length": 4.5, "rewards/exact_match/mean": 0.75,
     "rewards/format/mean": 1.0, "reward": 1.1},
]  # fmt: skip


def test_an_online_stages_curves_are_its_rewards_and_completion_length(tmp_path):
    entry = tmp_path / "c363faa78563c715e76e"
    entry.mkdir()
    (entry / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGGED))
    stage = StageView("grpo", "llm", "trained", entry=entry.name)
    curves = {c.name: c.points for c in stage_curves(tmp_path, stage)}
    assert list(curves) == [
        "training loss",
        "mean reward",
        "reward exact_match",
        "reward format",
        "completion length (tokens)",
    ]
    assert curves["reward exact_match"] == [(1.0, 1.0), (4.0, 0.708), (8.0, 0.75)]
    assert curves["reward format"] == [(4.0, 0.5), (8.0, 1.0)]
    assert curves["completion length (tokens)"][-1] == (8.0, 4.5)
