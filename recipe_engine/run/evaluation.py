"""Held-out task metrics by generation: greedy, `max_new_tokens`, attention mask passed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from recipe_engine.config.schema import EvalConfig
from recipe_engine.resolve.converters import Message, TrlRow
from recipe_engine.resolve.row_shapes import row_shape
from recipe_engine.store.scores import Generation, TaskMetrics


def is_exact_match(answer: str, reference: str) -> bool:
    """The engine's one definition of a correct answer: equal after stripping whitespace."""
    return answer.strip() == reference.strip()


def expects_its_answer(row: Any) -> bool:
    """Whether a row's answer is one to give: every row's but an undesirable completion's
    (unpaired feedback labelled false), which exact match leaves out."""
    return bool(row.get("label", True))


def contains_reference(answer: str, reference: str) -> bool:
    """The looser score: the reference occurs in the answer, in any case."""
    return reference.strip().lower() in answer.strip().lower()


def task_metrics(answers: Sequence[str], references: Sequence[str]) -> TaskMetrics:
    """Exact match (after stripping) and "contains" (reference inside the answer, any case)."""
    pairs = list(zip(answers, references, strict=True))
    n = max(len(pairs), 1)
    return TaskMetrics(
        exact_match=sum(is_exact_match(a, r) for a, r in pairs) / n,
        contains=sum(contains_reference(a, r) for a, r in pairs) / n,
    )


def generation_settings(settings: EvalConfig, seed: int) -> Generation:
    """How a run's eval settings generate answers, sampling (where asked) from `seed`."""
    return Generation.from_settings(asdict(settings), seed)


def capped(rows: Any, limit: int | None) -> Any:
    """The first `limit` rows of a dataset (all when None)."""
    return rows if limit is None or len(rows) <= limit else rows.select(range(limit))


def message_text(message: Message) -> str:
    content = message.get("content") or ""  # a turn that only calls tools says nothing
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content if part.get("type") == "text")


def prompt_text(processor: Any, row: TrlRow) -> str:
    """What the model is asked, as TRL trains it (`row_shapes.SHAPES`: its `asked`): a
    conversation's messages but the last, or a conversational prompt, through the chat
    template (with the row's `tools`, as TRL renders them); a plain prompt as it is."""
    question = row_shape(row).asked.question(row)
    if isinstance(question, str):
        return question
    tools = row.get("tools")
    with_tools = {"tools": json.loads(tools) if isinstance(tools, str) else tools} if tools else {}
    return processor.apply_chat_template(
        question, tokenize=False, add_generation_prompt=True, **with_tools
    )


def reference_text(row: TrlRow) -> str:
    """The answer a row expects: its last message, or its completion."""
    answer = row_shape(row).asked.answer(row)
    if isinstance(answer, str):
        return answer
    return "".join(message_text(m) for m in answer)


def generate_answers(model: Any, processor: Any, rows: Any, generation: Generation) -> list[str]:
    """Answers to each row's prompt (`prompt_text`), in eval mode; greedy unless do_sample."""
    torch.manual_seed(generation.seed)  # sampling, when asked for, is reproducible
    batch_size = generation.batch_size
    answers: list[str] = []
    model.eval()
    for start in range(0, len(rows), batch_size):
        batch = [rows[i] for i in range(start, min(start + batch_size, len(rows)))]
        answers += answer_batch(model, processor, batch, generation)
    return answers


def answer_batch(
    model: Any,
    processor: Any,
    batch: Sequence[Any],
    generation: Generation,
    streamer: Any = None,
) -> list[str]:
    """The answers to one batch of rows, generated as the model's mode stands; `streamer`
    (transformers' streamers, a batch of one row) is shown the tokens as they come: `chat`
    streams an answer that is the same as this function's, since it is this function's. Rows
    with pictures go through a vision-language model's processor (a text model's processor
    is its tokenizer, and its rows carry none)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    device = next(p.device for p in model.parameters() if p.device.type != "meta")
    texts = [prompt_text(processor, row) for row in batch]
    if batch[0].get("images") and hasattr(processor, "image_processor"):
        inputs = processor(
            text=texts,
            images=[row["images"] for row in batch],
            padding=True,
            padding_side="left",
            return_tensors="pt",
        )
    else:
        inputs = tokenizer(
            texts,
            padding=True,
            padding_side="left",
            return_tensors="pt",
            add_special_tokens=False,
        )
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with torch.no_grad():
        output = model.generate(
            **inputs,
            max_new_tokens=generation.max_new_tokens,
            do_sample=generation.do_sample,
            pad_token_id=tokenizer.pad_token_id,
            streamer=streamer,
            **_sampling(generation),
        )
    new_tokens = output[:, inputs["input_ids"].shape[1] :]
    return [t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]


def _sampling(generation: Generation) -> dict[str, float]:
    if not generation.do_sample:
        return {}
    return {"temperature": generation.temperature, "top_p": generation.top_p}


@dataclass(frozen=True)
class Prediction:
    """A held-out row's expected answer and the model's, as predictions.jsonl holds them."""

    reference: str
    answer: str


@dataclass(frozen=True)
class HeldOutAnswers:
    """A stage's held-out evaluation: the share of exact answers (`accuracy`), of answers
    containing the reference, and every row's prediction."""

    accuracy: float
    contains: float
    predictions: list[Prediction]


def exact_match(model: Any, processor: Any, rows: Any, generation: Generation) -> HeldOutAnswers:
    """Share of held-out rows whose answer equals the reference exactly. Every row is answered
    (the predictions); the scores count the rows whose answer is one to give
    (`expects_its_answer`: on unpaired feedback, the desirable rows)."""
    return score_answers(generate_answers(model, processor, rows, generation), rows)


def score_answers(answers: Sequence[str], rows: Any) -> HeldOutAnswers:
    """`exact_match` of answers generated already, one a row."""
    references = [reference_text(rows[i]).strip() for i in range(len(rows))]
    pairs = list(zip(answers, references, strict=True))
    scored = [pair for i, pair in enumerate(pairs) if expects_its_answer(rows[i])]
    hits = [is_exact_match(a, r) for a, r in scored]
    contained = [contains_reference(a, r) for a, r in scored]
    return HeldOutAnswers(
        accuracy=sum(hits) / len(hits) if hits else 0.0,
        contains=sum(contained) / len(contained) if contained else 0.0,
        predictions=[Prediction(r, a) for a, r in pairs],
    )


def write_predictions(folder: Path, predictions: Sequence[Prediction]) -> None:
    with (folder / "predictions.jsonl").open("w") as handle:
        handle.writelines(json.dumps(asdict(p)) + "\n" for p in predictions)
