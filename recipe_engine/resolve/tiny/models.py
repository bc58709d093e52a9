"""The tiny built-in models: built from config, tokenizers trained on the built-in datasets'
words, briefly pre-trained, saved with save_pretrained into `<cache>/models/<name>-<version>`.

Nothing here touches a model hub. Every model is built deterministically on first use and
reused afterwards (`build.build_once`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipe_engine.config.library_objects import LibraryKwargs
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import default_cache_dir
from recipe_engine.resolve.tiny.build import SEED as _SEED
from recipe_engine.resolve.tiny.build import VERSION as _VERSION
from recipe_engine.resolve.tiny.build import build_once as _build_once
from recipe_engine.resolve.tiny.shapes import (
    COLOURS,
    SHAPES,
    SHAPES_IMAGE_SIZE,
    SHAPES_QUESTION,
)
from recipe_engine.resolve.tiny.tokenizers import (
    IDEFICS3_SPECIALS,
    LLAMA_CHAT_TEMPLATE,
    LLAMA_SPECIALS,
    LLAVA_SPECIALS,
    QWEN_CHAT_TEMPLATE,
    QWEN_SPECIALS,
    TokenizerSpec,
    save_generation_config,
    train_tokenizer,
)

TINY_MODELS: tuple[str, ...] = (
    "tiny-qwen2-vl",
    "tiny-qwen2.5-vl",
    "tiny-llava",
    "tiny-idefics3",
    "tiny-llama",
    "tiny-qwen2",
    "tiny-qwen2-large",
)


_TEXT_SIZE: LibraryKwargs = {  # a text config class's sizes
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}
# tiny-qwen2-large: tiny-qwen2's tokenizer (the same files) in a wider, deeper model (about
# 8x the parameters): a teacher a tiny-qwen2 stage can learn from by distillation.
_TEXT_SIZE_LARGE: LibraryKwargs = {
    **_TEXT_SIZE,
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
}
# The vision towers of the Llama-based VLMs (CLIP for LLaVA, SigLIP-style for Idefics3).
_VISION_SIZE: LibraryKwargs = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}
# head_dim 16 -> 8 rotary frequencies, split over (temporal, height, width).
_QWEN2_VL_MROPE_SECTION = [2, 3, 3]
_QWEN2_VL_VISION: LibraryKwargs = {
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "mlp_ratio": 2,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


# --- public API --------------------------------------------------------------------------------


def build_tiny_model(name: str, cache_dir: Path | None = None) -> Path:
    """Build (once) the tiny model ``name`` and return its save_pretrained folder."""
    builders: dict[str, Callable[[Path], None]] = {
        "tiny-qwen2-vl": _build_qwen2_vl,
        "tiny-qwen2.5-vl": _build_qwen2_5_vl,
        "tiny-llava": _build_llava,
        "tiny-idefics3": _build_idefics3,
        "tiny-llama": _build_llama,
        "tiny-qwen2": _build_qwen2,
        "tiny-qwen2-large": _build_qwen2_large,
    }
    if name not in builders:
        raise RecipeError(
            f"Unknown tiny model `{name}`.{did_you_mean(name, TINY_MODELS)} "
            f"Built-in tiny models: {', '.join(TINY_MODELS)}.",
            key="model",
        )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return _build_once(root / "models" / f"{name}-{_VERSION}", _on_one_thread(builders[name]))


def _on_one_thread(build: Callable[[Path], None]) -> Callable[[Path], None]:
    """``build`` with torch on one thread. A model's sums run in an order that depends on the
    thread count, so one count gives the same weights on a machine of any core count; and at
    this size a second thread only waits (tiny-qwen2-vl on 2 cores: 78 s either way, 78 CPU s
    on one thread against 144 on two)."""

    def on_one_thread(folder: Path) -> None:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            build(folder)
        finally:
            torch.set_num_threads(before)

    return on_one_thread


def _init_model(model_cls: Any, config: Any) -> Any:
    """Instantiate from config with a fixed seed (same name -> same weights), in float32."""
    import torch

    # fork_rng restores the caller's RNG state, so building never shifts a training run's seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        return model_cls(config).to(torch.float32)


# --- tokenizers --------------------------------------------------------------------------------


def _build_qwen2_vl(folder: Path) -> None:
    _build_qwen_vl(folder, qwen2_5=False)


def _build_qwen2_5_vl(folder: Path) -> None:
    _build_qwen_vl(folder, qwen2_5=True)


def _build_qwen_vl(folder: Path, qwen2_5: bool) -> None:
    import transformers as tf

    tok = train_tokenizer(
        TokenizerSpec(
            QWEN_SPECIALS,
            bos=None,
            eos="<|im_end|>",
            pad="<|endoftext|>",
            chat_template=QWEN_CHAT_TEMPLATE,
            qwen=True,
        )
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    config, model_cls, processor_cls = _qwen_vl_classes(tok, ids, qwen2_5)
    # Shapes images keep their size (9 merged tokens); larger inputs are capped at 8x8 patches.
    pixels = {"min_pixels": 56 * 56, "max_pixels": 112 * 112}
    image_processor = tf.Qwen2VLImageProcessor(**pixels)
    model = _init_model(model_cls, config)
    _pretrain_parts(model, tok, image_processor)
    model.save_pretrained(folder)
    processor = processor_cls(
        image_processor=image_processor,
        video_processor=tf.Qwen2VLVideoProcessor(**pixels),
        tokenizer=tok,
        chat_template=QWEN_CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    save_generation_config(folder, ids["<|endoftext|>"], eos, ids["<|endoftext|>"])


def _qwen_vl_classes(tok: Any, ids: dict[str, int], qwen2_5: bool) -> tuple[Any, Any, Any]:
    """The tiny Qwen2-VL (or Qwen2.5-VL) config, model class and processor class."""
    import transformers as tf

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
    return config, model_cls, processor_cls


def _pretrain_parts(model: Any, tok: Any, image_processor: Any) -> None:
    """A real VLM starts from a pretrained vision encoder and LLM: see `pretrain`."""
    from recipe_engine.resolve.tiny.pretrain import (
        ShapesText,
        pretrain_language_model,
        pretrain_vision_tower,
    )

    pretrain_vision_tower(model, image_processor, seed=_SEED)
    span = (SHAPES_IMAGE_SIZE // 28) ** 2  # merged patches of one shapes picture
    task = ShapesText(list(COLOURS), SHAPES, SHAPES_QUESTION, span)
    pretrain_language_model(model, tok, task, seed=_SEED)


def _llama_text(specials: tuple[str, ...]) -> tuple[Any, dict[str, int], Any]:
    """The tokenizer, special-token ids and Llama text config of the Llama-based VLMs."""
    from transformers import LlamaConfig

    tok = train_tokenizer(
        TokenizerSpec(
            specials,
            bos="<s>",
            eos="</s>",
            pad="<pad>",
            chat_template=LLAMA_CHAT_TEMPLATE,
            qwen=False,
        )
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

    tok, ids, text = _llama_text(LLAVA_SPECIALS)
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
    save_generation_config(folder, ids["<s>"], [ids["</s>"]], ids["<pad>"])


def _build_idefics3(folder: Path) -> None:
    """SmolVLM's architecture: a SigLIP-style vision_model, a pixel-shuffle connector and a
    Llama text_model. Images are not split into tiles: one global image of 9 tokens."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    tok, ids, text = _llama_text(IDEFICS3_SPECIALS)
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
    save_generation_config(folder, ids["<s>"], [ids["</s>"]], ids["<pad>"])


def _build_text_model(folder: Path, qwen: bool, size: LibraryKwargs = _TEXT_SIZE) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if qwen:
        tok = train_tokenizer(
            TokenizerSpec(
                QWEN_SPECIALS[:3],
                bos=None,
                eos="<|im_end|>",
                pad="<|endoftext|>",
                chat_template=QWEN_CHAT_TEMPLATE,
                qwen=True,
            )
        )
        bos = pad = tok.convert_tokens_to_ids("<|endoftext|>")
        eos = [tok.convert_tokens_to_ids("<|im_end|>"), bos]
        config: Any = Qwen2Config(
            **size,
            vocab_size=len(tok),
            bos_token_id=bos,
            eos_token_id=eos[0],
            pad_token_id=pad,
        )
        model_cls: Any = Qwen2ForCausalLM
    else:
        # Deliberately no pad token: the engine must fall back to EOS for padding.
        tok = train_tokenizer(
            TokenizerSpec(
                LLAMA_SPECIALS,
                bos="<s>",
                eos="</s>",
                pad=None,
                chat_template=LLAMA_CHAT_TEMPLATE,
                qwen=False,
            )
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
    save_generation_config(folder, bos, eos, pad)


def _build_llama(folder: Path) -> None:
    _build_text_model(folder, qwen=False)


def _build_qwen2(folder: Path) -> None:
    _build_text_model(folder, qwen=True)


def _build_qwen2_large(folder: Path) -> None:
    _build_text_model(folder, qwen=True, size=_TEXT_SIZE_LARGE)


# --- dataset builders --------------------------------------------------------------------------
