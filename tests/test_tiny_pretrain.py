"""The tiny Qwen2-VL's parts are pre-trained apart, like a real VLM's: its language model
answers the task's text format, reading the picture's place, before any stage trains it."""

from __future__ import annotations

import random

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.resolve.tiny.pretrain import _sample
from recipe_engine.resolve.tiny.shapes import COLOURS, SHAPES, SHAPES_QUESTION


def test_a_text_sample_holds_its_colour_and_shape_among_fillers():
    rng = random.Random(0)
    for _ in range(200):
        colour, shape, span = _sample(rng, list(COLOURS), SHAPES, 9)
        assert len(span) == 9 and colour in span and shape in span
        assert not set(span) & (set(COLOURS) - {colour}) and not set(span) & (set(SHAPES) - {shape})


def test_the_language_model_copies_colour_and_shape_from_the_pictures_place():
    folder = build_tiny_model("tiny-qwen2-vl")
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    rng = random.Random(5)
    right = 0
    for _ in range(24):
        colour, shape, span = _sample(rng, list(COLOURS), SHAPES, 9)
        picture = "<|vision_start|>" + "".join(f" {w}" for w in span) + "<|vision_end|>"
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": picture + SHAPES_QUESTION}],
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=3, do_sample=False)
        answer = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        right += answer.strip() == f"{colour} {shape}"
    assert right >= 22
