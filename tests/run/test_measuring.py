"""One pass per model per run (`run.measuring`): the stage measures the model it holds, the
run's comparison reads those records and loads nothing, `compare` alone still measures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from transformers import PreTrainedModel

from recipe_engine.cli.main import main
from recipe_engine.run import evaluation, measuring
from recipe_engine.store.scores import Generation, JudgedAnswers, Measurement, Probe

QUICK = ("data.max_samples=16", "eval.max_samples=4")


def test_a_measurement_reads_back_as_written_and_only_for_what_it_answered(tmp_path):
    measured = Measurement(
        "hash-of-asked", "4-bit", ["4", "6"], 1.25, True, JudgedAnswers([(-1.0, -2.5)], ["4"])
    )
    measuring.write_measurement(tmp_path, "llm", measured)
    assert measuring.read_measurement(tmp_path, "llm", "hash-of-asked") == measured
    assert measuring.read_measurement(tmp_path, "llm", "other probes") is None
    assert measuring.read_measurement(tmp_path, "base", "hash-of-asked") is None
    (tmp_path / "measured" / "llm.json").write_text('{"asked": "hash-of-asked", "answ')
    assert measuring.read_measurement(tmp_path, "llm", "hash-of-asked") is None  # cut short


def test_what_is_asked_is_named_by_its_probes_generation_and_loss_settings():
    probe = Probe({"prompt": "2+2?", "completion": "4", "images": []}, "4", "2+2?", "")
    asked = measuring.Asked([probe])
    loss = {"completion_only_loss": True}
    same = asked.identity(Generation(), loss)
    assert same == measuring.Asked([probe]).identity(Generation(), dict(loss))
    assert same != asked.identity(Generation(max_new_tokens=4), loss)
    assert same != asked.identity(Generation(), {"completion_only_loss": False})
    other = Probe({"prompt": "2+3?", "completion": "5", "images": []}, "5", "2+3?", "")
    assert same != measuring.Asked([other]).identity(Generation(), loss)


@pytest.fixture()
def counted(monkeypatch):
    """Every model load (by location) and every generation pass (by rows) the run makes,
    each delegated to the real function."""
    loads: Counter[str] = Counter()
    passes: list[int] = []
    load = PreTrainedModel.from_pretrained.__func__

    def counting_load(cls, location, *args, **kwargs):
        loads[str(location)] += 1
        return load(cls, location, *args, **kwargs)

    generate = evaluation.generate_answers

    def counting_generate(model, processor, rows, generation):
        passes.append(len(rows))
        return generate(model, processor, rows, generation)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(counting_load))
    monkeypatch.setattr(evaluation, "generate_answers", counting_generate)
    return loads, passes


def run_dir_of(root: Path) -> Path:
    [recipe] = (root / "runs").iterdir()
    [run] = recipe.iterdir()
    return run


def test_a_run_loads_each_model_once_for_evaluation_and_asks_it_once(counted, tmp_path):
    """r3: the vision stage loads the base to train and once more to measure it; the llm stage
    loads the vision stage's output to train. Each of the three models answers the probes
    once; the run's comparison loads nothing and asks nothing (it once loaded all three again
    and generated three more times)."""
    loads, passes = counted
    args = ["recipe=r3-two-stage", f"output_root={tmp_path}", *QUICK,
            "stage.vision.train.max_steps=2", "stage.llm.train.max_steps=2"]  # fmt: skip
    assert main(args) == 0
    run_dir = run_dir_of(tmp_path)
    [vision] = [str(p.parent) for p in tmp_path.glob("store/*/manifest.json")
                if json.loads(p.read_text())["stage"] == "vision"]  # fmt: skip
    base = next(location for location in loads if "tiny-qwen2-vl" in location)
    assert loads == Counter({base: 2, vision: 1})
    assert passes == [4, 4, 4]  # base, vision, llm: once each
    assert sorted(p.stem for p in (run_dir / "measured").glob("*.json")) == [
        "base",
        "llm",
        "vision",
    ]
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    assert [metrics[m]["base_precision"] for m in ("base", "vision", "llm")] == [
        "full",
        "full",
        "4-bit",  # measured as it trained: on its 4-bit base
    ]


def test_judged_rows_are_asked_once_per_model_and_compare_alone_gives_the_same(counted, tmp_path):
    """r6 (SFT then KTO, full precision): each model answers the probes and the judged rows
    once in the run; `compare` asked afterwards loads and measures every model again and
    writes the very same metrics; `compare run_passes=true` reads the run's own passes."""
    _, passes = counted
    args = ["recipe=r6-sft-kto-text", f"output_root={tmp_path}", *QUICK,
            "stage.llm.train.max_steps=2", "stage.kto.train.max_steps=2"]  # fmt: skip
    assert main(args) == 0
    assert len(passes) == 6  # base, llm, kto: probes and judged rows, once each
    run_dir = run_dir_of(tmp_path)
    during_run = json.loads((run_dir / "compare_metrics.json").read_text())
    assert during_run["kto"]["preference"]["judged"] == "unpaired"
    passes.clear()
    assert main(["compare", f"run={run_dir}"]) == 0
    assert len(passes) == 6  # measured on demand
    assert json.loads((run_dir / "compare_metrics.json").read_text()) == during_run
    passes.clear()  # as after a distributed run: the run's passes read, nothing measured
    assert main(["compare", f"run={run_dir}", "run_passes=true"]) == 0
    assert passes == []
    assert json.loads((run_dir / "compare_metrics.json").read_text()) == during_run
