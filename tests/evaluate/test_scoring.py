"""`evaluate.scoring`: a comparison's records (metrics JSON, CSV, JSONL), written from what was
measured (by hand here: no model is loaded)."""

from __future__ import annotations

import csv
import json

from measured import measured

from recipe_engine.evaluate.scoring import file_stem, write_scores
from recipe_engine.store.scores import metrics_json


def test_a_probe_file_names_its_own_records():
    assert file_stem(None) == "compare"  # the run's own report
    assert file_stem("data/my probes.v2.jsonl") == "compare-my_probes.v2"


def test_records_hold_every_answer_and_each_models_labelled_metrics(tmp_path):
    scored = write_scores(measured(tmp_path / "run"), tmp_path / "mine.jsonl")
    assert scored.stem == "compare-mine"
    assert scored.paths() == {
        "csv": tmp_path / "run" / "compare-mine.csv",
        "jsonl": tmp_path / "run" / "compare-mine.jsonl",
        "metrics_path": tmp_path / "run" / "compare-mine_metrics.json",
    }
    with scored.csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [
        "id", "input", "image", "reference", "output_base", "output_vision", "output_llm",
    ]  # fmt: skip
    assert [r["output_llm"] for r in rows] == ["red circle", "a blue square"]
    lines = [json.loads(line) for line in scored.jsonl.read_text().splitlines()]
    assert lines[1]["outputs"] == {"base": "blue", "vision": "blue", "llm": "a blue square"}
    saved = json.loads(scored.metrics_path.read_text())
    assert saved == metrics_json(scored.measured.metrics)
    # Every model measured on the full-precision base; the run's own numbers beside, labelled.
    assert {m["base_precision"] for m in saved.values()} == {"full"}
    assert saved["base"]["run_accuracy"] == "25%" and saved["base"]["run_loss"] is None
    assert saved["vision"]["run_accuracy"] == "50%" and saved["vision"]["run_loss"] == "1.2500"
    assert saved["llm"]["run_accuracy"] == "50% (4-bit base)"
    assert saved["llm"]["run_loss"] == "1.2500 (4-bit base)"
