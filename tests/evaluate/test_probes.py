"""`evaluate.probes`: what a comparison asks, read from a probe file as the run's own rows were."""

from __future__ import annotations

from recipe_engine.evaluate.probes import probe_chat_template, probe_file_rows
from recipe_engine.store.records import Manifest


def manifest_with(**data) -> Manifest:
    return Manifest(
        "llm", "text-lora", "f" * 64, "peft_adapter", {"kind": "causal_lm"}, "float32", data=data
    )


def test_plain_probe_rows_are_asked_as_the_runs_rows_were(tmp_path):
    """A probe file of plain prompt/completion rows goes through the chat template where the
    plan put the run's rows there (or, for a run on conversations, where the model has one)."""
    from recipe_engine.resolve.tiny import build_tiny_model

    probes = tmp_path / "probes.jsonl"
    probes.write_text('{"prompt": "2 + 2?", "completion": "4"}\n')
    folder = build_tiny_model("tiny-qwen2")  # a stage output keeps its base's tokenizer
    decided = {
        setting: probe_chat_template(folder, manifest_with(chat_template=setting))
        for setting in ("true", "false", "auto")
    }
    assert decided == {"true": "true", "false": "false", "auto": "true"}
    [chat] = probe_file_rows(probes, "causal_lm", 0, "true")
    assert chat.row["prompt"] == [{"role": "user", "content": "2 + 2?"}] and chat.reference == "4"
    assert chat.input == "2 + 2?"  # the report shows the question, not the template
    [plain] = probe_file_rows(probes, "causal_lm", 0, "false")
    assert plain.row["prompt"] == "2 + 2?"
