"""Pre-train a tiny VLM's parts separately, the way real VLMs start: from a pretrained vision
encoder (CLIP, SigLIP) and a pretrained LLM that have never seen each other.

A tiny model built from config is random everywhere: a vision stage trained against its frozen
random LLM could learn nothing the LLM reads, and a from-scratch vision tower needs thousands of
steps to tell a circle from a square. So the tiny Qwen2-VL builders pre-train briefly:

- the vision tower (with its merger) classifies shapes, the task's three and two no answer
  names, drawn in any colour: it knows shapes, not the task's colour names, and its output is
  not aligned with the language model (the classifier head is thrown away);
- the language model (with its embeddings and head) reads text in the chat layout of the shapes
  task, with the picture's place taken by words:

    <|vision_start|> circle - red - - circle - - - <|vision_end|>What is in the picture?
    -> red circle

The span has as many tokens as a picture has merged patches, the colour and the shape appear at
random places among neutral fillers, so the language model learns to answer with the colour and
the shape it reads in the picture's span. A vision stage then only has to make the picture's
tokens look like those words; a language-model stage starts from a model that already knows the
answer format. Both run through transformers' Trainer, seeded, on the one thread the builder
gives them (tiny-qwen2-vl: about 80 s on a 2-core AMD EPYC).
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.resolve.tiny.shapes import ALL_SHAPES, draw_any_shape

if TYPE_CHECKING:
    from transformers.modeling_outputs import SequenceClassifierOutput

# Neutral words the span's other places hold: in the tokenizer's vocabulary, never an answer.
_FILLERS = ("Picture", "Video", "system", "user")
_TEXT_ROWS = 4096
_TEXT_EPOCHS = 2
_VISION_STEPS = 1000  # 300 steps: 88% of task shapes told apart by the classifier; 600: 98%
_BATCH = 32
_LR = 3e-3


def pretrain_vision_tower(model: Any, image_processor: Any, *, seed: int) -> None:
    """Train ``model``'s vision tower and merger in place to classify ``ALL_SHAPES``."""
    with torch.random.fork_rng(devices=[]):  # the head's init must not depend on the caller
        torch.manual_seed(seed)
        head = torch.nn.Linear(model.config.text_config.hidden_size, len(ALL_SHAPES))
    classifier = _ShapeClassifier(model.model.visual, head)
    pictures = _ShapePictures(seed)
    _train(
        classifier,
        pictures,
        collate=lambda batch: pictures.collate(batch, image_processor),
        seed=seed,
        schedule=Schedule(max_steps=_VISION_STEPS),
    )


@dataclass(frozen=True)
class ShapesText:
    """The shapes task's text: the words of its answers, its question, and how many tokens
    stand in for one picture (its merged patches)."""

    colours: Sequence[str]
    shapes: Sequence[str]
    question: str
    span_tokens: int


@dataclass(frozen=True)
class Schedule:
    epochs: int = 1
    max_steps: int = -1


def pretrain_language_model(model: Any, tokenizer: Any, task: ShapesText, *, seed: int) -> None:
    """Train ``model``'s language model in place on the shapes task's text (see the module doc)."""
    from datasets import Dataset
    from transformers import default_data_collator

    rng = random.Random(seed)
    rows = [
        _encode(
            tokenizer, *_sample(rng, task.colours, task.shapes, task.span_tokens), task.question
        )
        for _ in range(_TEXT_ROWS)
    ]
    vision = model.model.visual
    frozen = [p for p in vision.parameters() if p.requires_grad]
    for param in frozen:
        param.requires_grad_(False)
    try:
        _train(
            model,
            Dataset.from_list(rows),
            collate=default_data_collator,
            seed=seed,
            schedule=Schedule(epochs=_TEXT_EPOCHS),
        )
    finally:
        for param in frozen:
            param.requires_grad_(True)


def _train(
    model: Any,
    dataset: Any,
    *,
    collate: Callable[[list[Any]], LibraryKwargs],  # a batch: the model's forward kwargs
    seed: int,
    schedule: Schedule,
) -> None:
    from transformers import PrinterCallback, Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as scratch, torch.random.fork_rng(devices=[]):
        args = TrainingArguments(
            output_dir=scratch,
            per_device_train_batch_size=_BATCH,
            num_train_epochs=schedule.epochs,
            max_steps=schedule.max_steps,
            learning_rate=_LR,
            lr_scheduler_type="cosine",
            warmup_steps=20,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            seed=seed,
            use_cpu=True,
            disable_tqdm=True,
            remove_unused_columns=False,
        )
        trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate)
        trainer.remove_callback(PrinterCallback)  # a build prints no training logs
        trainer.train()


class _ShapeClassifier(torch.nn.Module):
    """The vision tower and merger, mean-pooled over a picture's tokens, then a linear head."""

    def __init__(self, visual: Any, head: Any) -> None:
        super().__init__()
        self.visual, self.head = visual, head

    def forward(
        self, pixel_values: Any, image_grid_thw: Any, labels: Any
    ) -> SequenceClassifierOutput:
        from transformers.modeling_outputs import SequenceClassifierOutput

        merged = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
        pooled = merged.view(len(image_grid_thw), -1, merged.shape[-1]).mean(dim=1)
        logits = self.head(pooled)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


class _ShapePictures(torch.utils.data.IterableDataset):
    """An endless, seeded stream of (picture, shape index): any shape in any bright colour."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        rng = random.Random(self.seed)
        while True:
            index = rng.randrange(len(ALL_SHAPES))
            ink = (rng.randint(60, 255), rng.randint(60, 255), rng.randint(60, 255))
            yield draw_any_shape(rng, ink, ALL_SHAPES[index]), index

    @staticmethod
    def collate(batch: list[tuple[Any, int]], image_processor: Any) -> dict[str, torch.Tensor]:
        pixels = image_processor(images=[picture for picture, _ in batch], return_tensors="pt")
        return {
            "pixel_values": pixels["pixel_values"],
            "image_grid_thw": pixels["image_grid_thw"],
            "labels": torch.tensor([index for _, index in batch]),
        }


def _sample(
    rng: random.Random, colours: Sequence[str], shapes: Sequence[str], span_tokens: int
) -> tuple[str, str, list[str]]:
    colour, shape = rng.choice(colours), rng.choice(shapes)
    words = [rng.choice(_FILLERS) for _ in range(span_tokens)]
    places = rng.sample(range(span_tokens), k=rng.randint(2, span_tokens))
    for i, place in enumerate(places):  # at least one colour and one shape, then either
        words[place] = colour if i == 0 or (i > 1 and rng.random() < 0.5) else shape
    return colour, shape, words


def _encode(
    tokenizer: Any, colour: str, shape: str, span: list[str], question: str
) -> LibraryKwargs:
    picture = "<|vision_start|>" + "".join(f" {w}" for w in span) + "<|vision_end|>"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": picture + question}],
        tokenize=False,
        add_generation_prompt=True,
    )
    answer = f"{colour} {shape}<|im_end|>\n"
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    return {
        "input_ids": prompt_ids + answer_ids,
        "attention_mask": [1] * (len(prompt_ids) + len(answer_ids)),
        "labels": [-100] * len(prompt_ids) + answer_ids,
    }
