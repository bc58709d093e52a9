"""Embedded offline defaults: tiny models built from config and small generated datasets.

Nothing here touches a model hub. Every artefact is built deterministically on first use into
``<cache>/models/<name>-<version>`` or ``<cache>/data/<name>-<version>`` and reused afterwards.
A build writes into a hidden temporary folder beside the target and renames it into place, so a
folder at the target path is always complete; a lock (``<cache>/locks/``) makes a second process
wait for the first build instead of repeating it.

Bump the version suffix (``_VERSION``) whenever a change alters what gets built, so stale caches
are never mistaken for the new artefacts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import file_lock, share_as_umask
from recipe_engine.tiny_shapes import (
    COLOURS,
    SHAPES,
    SHAPES_IMAGE_SIZE,
    SHAPES_QUESTION,
    draw_shape,
)

TINY_MODELS: tuple[str, ...] = (
    "tiny-qwen2-vl",
    "tiny-qwen2.5-vl",
    "tiny-llava",
    "tiny-idefics3",
    "tiny-llama",
    "tiny-qwen2",
)
# Built-in datasets and the format of their rows (what `data.format: auto` resolves to).
TINY_DATASETS: dict[str, str] = {"shapes": "vlm", "arithmetic": "messages"}

_VERSION = "v3"
_SEED = 1234

# --- dataset vocabulary (the tokenizers are trained on exactly these words) -----------------------

_SHAPES_TRAIN_PER_CLASS = 80  # 12 classes -> 960 rows
_SHAPES_EVAL_PER_CLASS = 8  # 12 classes -> 96 rows

# Single-digit operands keep the answer table small enough for a 2-layer model to learn quickly.
ARITH_MAX_OPERAND = 9
_ARITH_TRAIN_ROWS = 800
_ARITH_EVAL_ROWS = 64

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

_QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_LLAMA_SPECIALS = ("<s>", "</s>")
_LLAVA_SPECIALS = ("<s>", "</s>", "<pad>", "<image>")
# Idefics3's processor wraps each image as <fake_token_around_image><global-img><image>*N...
_IDEFICS3_SPECIALS = (
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

_TEXT_SIZE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}
# The vision towers of the Llama-based VLMs (CLIP for LLaVA, SigLIP-style for Idefics3).
_VISION_SIZE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}
# head_dim 16 -> 8 rotary frequencies, split over (temporal, height, width).
_QWEN2_VL_MROPE_SECTION = [2, 3, 3]
_QWEN2_VL_VISION: dict[str, Any] = {
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "mlp_ratio": 2,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


# --- public API --------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$RECIPE_ENGINE_CACHE`` if set, else ``$XDG_CACHE_HOME/recipe-engine``, else
    ``~/.cache/recipe-engine``: the user's cache, never the package's folder (an installed
    package may be read-only, shared by users, and replaced on upgrade)."""
    env = os.environ.get("RECIPE_ENGINE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "recipe-engine"


def build_tiny_model(name: str, cache_dir: Path | None = None) -> Path:
    """Build (once) the tiny model ``name`` and return its save_pretrained folder."""
    builders: dict[str, Callable[[Path], None]] = {
        "tiny-qwen2-vl": _build_qwen2_vl,
        "tiny-qwen2.5-vl": _build_qwen2_5_vl,
        "tiny-llava": _build_llava,
        "tiny-idefics3": _build_idefics3,
        "tiny-llama": _build_llama,
        "tiny-qwen2": _build_qwen2,
    }
    if name not in builders:
        raise RecipeError(
            f"Unknown tiny model `{name}`.{did_you_mean(name, TINY_MODELS)} "
            f"Built-in tiny models: {', '.join(TINY_MODELS)}.",
            key="model",
        )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return _build_once(root / "models" / f"{name}-{_VERSION}", builders[name])


def build_dataset(name: str, cache_dir: Path | None = None) -> Path:
    """Build (once) the generated dataset ``name``; return the folder with train/eval.jsonl."""
    builders: dict[str, Callable[[Path], None]] = {
        "shapes": _build_shapes,
        "arithmetic": _build_arithmetic,
    }
    if name not in builders:
        raise RecipeError(
            f"Unknown built-in dataset `{name}`.{did_you_mean(name, TINY_DATASETS)} "
            f"Built-in datasets: {', '.join(TINY_DATASETS)}.",
            key="data",
        )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return _build_once(root / "data" / f"{name}-{_VERSION}", builders[name])


# --- build-once machinery ----------------------------------------------------------------------


def _build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build`` into a temp folder and rename it to ``target``, unless target exists."""
    # Only complete folders ever appear at `target` (they arrive by rename), so existence is
    # enough to trust it.
    if target.is_dir():
        return target
    # The lock lives in <cache>/locks/: models/ and data/ hold only complete artefacts.
    lock = target.parent.parent / "locks" / f"{target.parent.name}-{target.name}.lock"
    with file_lock(lock):
        if not target.is_dir():  # else another process built it while this one waited
            _build_into(target, build)
    return target


def _build_into(target: Path, build: Callable[[Path], None]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        build(tmp)
        share_as_umask(tmp)  # mkdtemp and safetensors make private files; a cache may be shared
        try:
            os.rename(tmp, target)
        except OSError:
            # A builder that took no lock (an older engine sharing this cache) came first.
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _init_model(model_cls: Any, config: Any) -> Any:
    """Instantiate from config with a fixed seed (same name -> same weights), in float32."""
    import torch

    # fork_rng restores the caller's RNG state, so building never shifts a training run's seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        return model_cls(config).to(torch.float32)


# --- tokenizers --------------------------------------------------------------------------------


def _tokenizer_corpus() -> list[str]:
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


def _train_tokenizer(
    special_tokens: tuple[str, ...],
    bos: str | None,
    eos: str,
    pad: str | None,
    chat_template: str,
    qwen: bool,
) -> Any:
    """A byte-level BPE tokenizer trained on the dataset vocabulary, wrapped for transformers.

    ``qwen=True`` trains with Qwen2's own normalizer and pre-tokenizer (single digits) and wraps
    the result in ``Qwen2Tokenizer``: AutoTokenizer rebuilds Qwen tokenizers from vocab and merges
    with that fixed pipeline, so anything else would tokenize differently once reloaded.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

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
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    named = {eos, *(t for t in (bos, pad) if t)}
    common: dict[str, Any] = {
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "extra_special_tokens": [t for t in special_tokens if t not in named],
        "model_max_length": _TEXT_SIZE["max_position_embeddings"],
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
    wrapped.chat_template = chat_template
    return wrapped


def _save_generation_config(folder: Path, bos: int | None, eos: list[int], pad: int | None) -> None:
    from transformers import GenerationConfig

    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad).save_pretrained(folder)


# --- model builders ----------------------------------------------------------------------------


def _build_qwen2_vl(folder: Path) -> None:
    _build_qwen_vl(folder, qwen2_5=False)


def _build_qwen2_5_vl(folder: Path) -> None:
    _build_qwen_vl(folder, qwen2_5=True)


def _build_qwen_vl(folder: Path, qwen2_5: bool) -> None:
    import transformers as tf

    tok = _train_tokenizer(
        _QWEN_SPECIALS,
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template=QWEN_CHAT_TEMPLATE,
        qwen=True,
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in _QWEN_SPECIALS}
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = dict(
        _TEXT_SIZE,
        vocab_size=len(tok),
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1_000_000.0,
            "mrope_section": _QWEN2_VL_MROPE_SECTION,
        },
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    if qwen2_5:  # windowed attention in all but the last block; SwiGLU MLP
        vision = dict(
            _QWEN2_VL_VISION,
            hidden_size=_QWEN2_VL_VISION["embed_dim"],
            intermediate_size=128,
            out_hidden_size=_TEXT_SIZE["hidden_size"],
            window_size=56,
            fullatt_block_indexes=[1],
        )
        config_cls, model_cls = tf.Qwen2_5_VLConfig, tf.Qwen2_5_VLForConditionalGeneration
        processor_cls = tf.Qwen2_5_VLProcessor
    else:
        vision = dict(_QWEN2_VL_VISION, hidden_size=_TEXT_SIZE["hidden_size"])  # merger -> LM
        config_cls, model_cls = tf.Qwen2VLConfig, tf.Qwen2VLForConditionalGeneration
        processor_cls = tf.Qwen2VLProcessor
    config = config_cls(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    # Shapes images keep their size (9 merged tokens); larger inputs are capped at 8x8 patches.
    pixels = {"min_pixels": 56 * 56, "max_pixels": 112 * 112}
    image_processor = tf.Qwen2VLImageProcessor(**pixels)
    model = _init_model(model_cls, config)
    # A real VLM starts from a pretrained vision encoder and LLM: see tiny_pretrain.
    from recipe_engine.tiny_pretrain import pretrain_language_model, pretrain_vision_tower

    pretrain_vision_tower(model, image_processor, seed=_SEED)
    pretrain_language_model(
        model,
        tok,
        colours=list(COLOURS),
        shapes=SHAPES,
        question=SHAPES_QUESTION,
        span_tokens=(SHAPES_IMAGE_SIZE // 28) ** 2,  # merged patches of one shapes picture
        seed=_SEED,
    )
    model.save_pretrained(folder)
    processor = processor_cls(
        image_processor=image_processor,
        video_processor=tf.Qwen2VLVideoProcessor(**pixels),
        tokenizer=tok,
        chat_template=QWEN_CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    _save_generation_config(folder, ids["<|endoftext|>"], eos, ids["<|endoftext|>"])


def _llama_text(specials: tuple[str, ...]) -> tuple[Any, dict[str, int], Any]:
    """The tokenizer, special-token ids and Llama text config of the Llama-based VLMs."""
    from transformers import LlamaConfig

    tok = _train_tokenizer(
        specials, bos="<s>", eos="</s>", pad="<pad>", chat_template=LLAMA_CHAT_TEMPLATE, qwen=False
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials}
    text = LlamaConfig(
        **_TEXT_SIZE,
        vocab_size=len(tok),
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        pad_token_id=ids["<pad>"],
    )
    return tok, ids, text


def _build_llava(folder: Path) -> None:
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok, ids, text = _llama_text(_LLAVA_SPECIALS)
    patch, size = 14, SHAPES_IMAGE_SIZE
    image_seq_length = (size // patch) ** 2  # CLS is dropped by the "default" strategy
    vision = CLIPVisionConfig(**_VISION_SIZE, projection_dim=64, image_size=size, patch_size=patch)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=ids["<image>"],
        image_seq_length=image_seq_length,
        vision_feature_select_strategy="default",
        # The last layer, not the usual -2: with a 2-layer tower every weight should matter.
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    model = _init_model(LlavaForConditionalGeneration, config)
    model.save_pretrained(folder)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        ),
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the CLS token
        chat_template=LLAMA_CHAT_TEMPLATE,
        image_token="<image>",
    )
    processor.save_pretrained(folder)
    _save_generation_config(folder, ids["<s>"], [ids["</s>"]], ids["<pad>"])


def _build_idefics3(folder: Path) -> None:
    """SmolVLM's architecture: a SigLIP-style vision_model, a pixel-shuffle connector and a
    Llama text_model. Images are not split into tiles: one global image of 9 tokens."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    tok, ids, text = _llama_text(_IDEFICS3_SPECIALS)
    size, patch, scale = SHAPES_IMAGE_SIZE, 14, 2
    config = Idefics3Config(
        vision_config=dict(_VISION_SIZE, image_size=size, patch_size=patch),
        text_config=text.to_dict(),
        scale_factor=scale,
        image_token_id=ids["<image>"],
        tie_word_embeddings=False,
    )
    model = _init_model(Idefics3ForConditionalGeneration, config)
    model.save_pretrained(folder)
    edge = {"longest_edge": size}
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(
            do_image_splitting=False, size=edge, max_image_size=edge
        ),
        tokenizer=tok,
        image_seq_len=(size // patch) ** 2 // scale**2,
        chat_template=LLAMA_CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    _save_generation_config(folder, ids["<s>"], [ids["</s>"]], ids["<pad>"])


def _build_text_model(folder: Path, qwen: bool) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if qwen:
        tok = _train_tokenizer(
            _QWEN_SPECIALS[:3],
            bos=None,
            eos="<|im_end|>",
            pad="<|endoftext|>",
            chat_template=QWEN_CHAT_TEMPLATE,
            qwen=True,
        )
        bos = pad = tok.convert_tokens_to_ids("<|endoftext|>")
        eos = [tok.convert_tokens_to_ids("<|im_end|>"), bos]
        config: Any = Qwen2Config(
            **_TEXT_SIZE,
            vocab_size=len(tok),
            bos_token_id=bos,
            eos_token_id=eos[0],
            pad_token_id=pad,
        )
        model_cls: Any = Qwen2ForCausalLM
    else:
        # Deliberately no pad token: the engine must fall back to EOS for padding.
        tok = _train_tokenizer(
            _LLAMA_SPECIALS,
            bos="<s>",
            eos="</s>",
            pad=None,
            chat_template=LLAMA_CHAT_TEMPLATE,
            qwen=False,
        )
        bos, pad = tok.convert_tokens_to_ids("<s>"), None
        eos = [tok.convert_tokens_to_ids("</s>")]
        config = LlamaConfig(
            **_TEXT_SIZE,
            vocab_size=len(tok),
            bos_token_id=bos,
            eos_token_id=eos[0],
            pad_token_id=None,
        )
        model_cls = LlamaForCausalLM
    model = _init_model(model_cls, config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    _save_generation_config(folder, bos, eos, pad)


def _build_llama(folder: Path) -> None:
    _build_text_model(folder, qwen=False)


def _build_qwen2(folder: Path) -> None:
    _build_text_model(folder, qwen=True)


# --- dataset builders --------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _build_shapes(folder: Path) -> None:
    (folder / "images").mkdir()
    classes = [(c, s) for c in COLOURS for s in SHAPES]
    for split, per_class, seed in (
        ("train", _SHAPES_TRAIN_PER_CLASS, _SEED),
        ("eval", _SHAPES_EVAL_PER_CLASS, _SEED + 1),
    ):
        rng = random.Random(seed)
        labels = [cls for cls in classes for _ in range(per_class)]
        rng.shuffle(labels)  # balanced classes, random order
        rows = []
        for i, (colour, shape) in enumerate(labels):
            rel = f"images/{split}_{i:04d}.png"
            draw_shape(rng, colour, shape).save(folder / rel)
            rows.append(
                {
                    "images": [rel],
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "image"},
                                {"type": "text", "text": SHAPES_QUESTION},
                            ],
                        },
                        {
                            "role": "assistant",
                            "content": [{"type": "text", "text": f"{colour} {shape}"}],
                        },
                    ],
                }
            )
        _write_jsonl(folder / f"{split}.jsonl", rows)


def _build_arithmetic(folder: Path) -> None:
    # The problem space is small on purpose (100 sums, 55 non-negative differences), so eval
    # draws mostly repeat training problems: exact match checks the table was learned.
    for split, count, seed in (
        ("train", _ARITH_TRAIN_ROWS, _SEED),
        ("eval", _ARITH_EVAL_ROWS, _SEED + 1),
    ):
        rng = random.Random(seed)
        rows = []
        for _ in range(count):
            a = rng.randint(0, ARITH_MAX_OPERAND)
            b = rng.randint(0, ARITH_MAX_OPERAND)
            if rng.random() < 0.5:
                question, answer = f"What is {a} + {b}?", a + b
            else:
                a, b = max(a, b), min(a, b)  # keep answers non-negative
                question, answer = f"What is {a} - {b}?", a - b
            rows.append(
                {
                    "messages": [
                        {"role": "user", "content": question},
                        {"role": "assistant", "content": str(answer)},
                    ]
                }
            )
        _write_jsonl(folder / f"{split}.jsonl", rows)
