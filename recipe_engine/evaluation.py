"""Held-out task metrics by generation: greedy, `max_new_tokens`, attention mask passed."""

from __future__ import annotations

from typing import Any

import torch


def message_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content if part.get("type") == "text")


def generate_answers(
    model: Any,
    processor: Any,
    rows: Any,
    kind: str,
    *,
    max_new_tokens: int = 8,
    batch_size: int = 16,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> list[str]:
    """Answers to each row's prompt (every message but the last); greedy unless do_sample."""
    torch.manual_seed(seed)  # sampling, when asked for, is reproducible
    tokenizer = getattr(processor, "tokenizer", processor)
    answers: list[str] = []
    model.eval()
    device = next(p.device for p in model.parameters() if p.device.type != "meta")
    for start in range(0, len(rows), batch_size):
        batch = [rows[i] for i in range(start, min(start + batch_size, len(rows)))]
        prompts = [row["messages"][:-1] for row in batch]
        texts = [
            processor.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
            for p in prompts
        ]
        if kind == "vlm" and batch[0].get("images"):
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
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                pad_token_id=tokenizer.pad_token_id,
                **({"temperature": temperature, "top_p": top_p} if do_sample else {}),
            )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        answers += [t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]
    return answers


def exact_match(model: Any, processor: Any, rows: Any, kind: str, **kwargs: Any) -> dict[str, Any]:
    """Share of held-out rows whose answer equals the reference exactly (kwargs: generation)."""
    answers = generate_answers(model, processor, rows, kind, **kwargs)
    references = [message_text(rows[i]["messages"][-1]).strip() for i in range(len(rows))]
    hits = [a == r for a, r in zip(answers, references, strict=True)]
    return {
        "accuracy": sum(hits) / len(hits) if hits else 0.0,
        "predictions": [
            {"reference": r, "answer": a} for a, r in zip(answers, references, strict=True)
        ],
    }
