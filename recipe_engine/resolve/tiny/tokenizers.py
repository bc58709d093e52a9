"""The tiny models' tokenizers: byte-level BPE trained on exactly the built-in datasets' words,
with the chat templates the engine's tiny models ship.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.resolve.tiny.datasets import ARITH_MAX_OPERAND
from recipe_engine.resolve.tiny.shapes import COLOURS, SHAPES, SHAPES_QUESTION

MAX_LENGTH = 1024  # the tiny text models' max_position_embeddings

# --- dataset vocabulary (the tokenizers are trained on exactly these words) -----------------------

_CHAT_WORDS = (
    "system",
    "user",
    "assistant",
    "USER",
    "ASSISTANT",
    "You are a helpful assistant.",
    "Picture",
    "Video",
)

# --- special tokens and chat templates ---------------------------------------------------------

QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
LLAMA_SPECIALS = ("<s>", "</s>")
LLAVA_SPECIALS = ("<s>", "</s>", "<pad>", "<image>")
# Idefics3's processor wraps each image as <fake_token_around_image><global-img><image>*N...
IDEFICS3_SPECIALS = (
    "<s>",
    "</s>",
    "<pad>",
    "<image>",
    "<fake_token_around_image>",
    "<global-img>",
    "<end_of_utterance>",
)

# The Qwen2-VL chat template (same rendering as the official one, which TRL also uses for Qwen2),
# with {% generation %} markers around the assistant turn so assistant-only loss works as is.
QWEN_CHAT_TEMPLATE = (
    "{%- set image_count = namespace(value=0) %}"
    "{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}{%- generation %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if 'text' in content %}{{- content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endgeneration %}{%- else %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}"
    "{%- if add_vision_id %}{{- 'Picture ' + image_count.value|string + ': ' }}{%- endif %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content['type'] == 'video' or 'video' in content %}"
    "{%- set video_count.value = video_count.value + 1 %}"
    "{%- if add_vision_id %}{{- 'Video ' + video_count.value|string + ': ' }}{%- endif %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A plain USER/ASSISTANT template for the Llama-family models. The prompt cue ends in a newline,
# not a space, so the answer's first token is the same in training and in generation.
LLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- 'ASSISTANT:\\n' }}{%- generation %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if 'text' in content %}{{- content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- eos_token }}{%- endgeneration %}{{- '\\n' }}"
    "{%- else %}"
    "{{- message['role'].upper() + ':\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content %}{{- '<image>\\n' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'ASSISTANT:\\n' }}{%- endif %}"
)

# --- small model sizes -------------------------------------------------------------------------


def tokenizer_corpus() -> list[str]:
    """Text covering every word and number of the shipped datasets and chat templates."""
    words: list[str] = [*COLOURS, *SHAPES]
    words += [str(n) for n in range(2 * ARITH_MAX_OPERAND + 1)]
    phrases = [SHAPES_QUESTION, "What is 3 + 4?", "What is 7 - 2?", *_CHAT_WORDS]
    for phrase in phrases:
        words += phrase.replace("?", " ?").replace(".", " .").split()
    lines: list[str] = []
    # Each word bare, after a space and after a newline: the three contexts it appears in, so
    # the byte-level BPE learns all of them as single tokens.
    for word in dict.fromkeys(words):
        lines += [word, f" {word}", f"\n{word}"] * 20
    lines += phrases * 20
    lines += [f"{c} {s}" for c in COLOURS for s in SHAPES] * 5
    return lines


@dataclass(frozen=True)
class TokenizerSpec:
    special_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str | None
    chat_template: str
    qwen: bool


def train_tokenizer(spec: TokenizerSpec) -> Any:
    """A byte-level BPE tokenizer trained on the dataset vocabulary, wrapped for transformers.

    ``qwen=True`` trains with Qwen2's own normalizer and pre-tokenizer (single digits) and wraps
    the result in ``Qwen2Tokenizer``: AutoTokenizer rebuilds Qwen tokenizers from vocab and merges
    with that fixed pipeline, so anything else would tokenize differently once reloaded.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    special_tokens, bos, eos, pad, qwen = (
        spec.special_tokens,
        spec.bos,
        spec.eos,
        spec.pad,
        spec.qwen,
    )
    tok = Tokenizer(models.BPE())
    if qwen:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # A generous vocab cap: training stops by itself once every corpus word is one token.
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        min_frequency=1,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    named = {eos, *(t for t in (bos, pad) if t)}
    common: LibraryKwargs = {  # the tokenizer class's
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "extra_special_tokens": [t for t in special_tokens if t not in named],
        "model_max_length": MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
    }
    if qwen:
        merges = [
            tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
            for m in json.loads(tok.to_str())["model"]["merges"]
        ]
        wrapped = Qwen2Tokenizer(vocab=tok.get_vocab(), merges=merges, unk_token=None, **common)
    else:
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, **common)
    wrapped.chat_template = spec.chat_template
    return wrapped


def save_generation_config(folder: Path, bos: int | None, eos: list[int], pad: int | None) -> None:
    from transformers import GenerationConfig

    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad).save_pretrained(folder)


# --- model builders ----------------------------------------------------------------------------
