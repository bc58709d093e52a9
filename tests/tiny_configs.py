"""Tiny random models built from config, shared by the component and policy tests."""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

TEXT = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
)
QWEN_VISION = dict(depth=1, hidden_size=32, num_heads=2, patch_size=2, temporal_patch_size=2)
QWEN_TEXT = dict(TEXT, rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2]})
CLIP_VISION = dict(
    model_type="clip_vision_model",
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
)
SIGLIP_VISION = dict(CLIP_VISION, model_type="siglip_vision_model", num_hidden_layers=1)


def tiny_model(kind: str, *, device: str = "cpu", tie: bool = False) -> Any:
    """kind: qwen2_vl | qwen2_5_vl | llava | idefics3 | gemma3 | llama | qwen2.
    Seeded: equal calls, equal weights."""
    if kind == "qwen2_vl":
        vision = dict(QWEN_VISION, embed_dim=32, mlp_ratio=2)
        config = tf.Qwen2VLConfig(
            text_config=QWEN_TEXT, vision_config=vision, tie_word_embeddings=tie
        )
        cls = tf.Qwen2VLForConditionalGeneration
    elif kind == "qwen2_5_vl":
        vision = dict(QWEN_VISION, out_hidden_size=32, intermediate_size=64)
        config = tf.Qwen2_5_VLConfig(text_config=QWEN_TEXT, vision_config=vision)
        cls = tf.Qwen2_5_VLForConditionalGeneration
    elif kind == "llava":
        text = tf.LlamaConfig(**TEXT)
        config = tf.LlavaConfig(text_config=text, vision_config=CLIP_VISION, image_token_id=3)
        cls = tf.LlavaForConditionalGeneration
    elif kind == "idefics3":
        vision = dict(SIGLIP_VISION, model_type="idefics3_vision")
        config = tf.Idefics3Config(
            text_config=tf.LlamaConfig(**TEXT), vision_config=vision, scale_factor=2
        )
        cls = tf.Idefics3ForConditionalGeneration
    elif kind == "gemma3":
        text = dict(TEXT, model_type="gemma3_text", head_dim=8, sliding_window=16)
        config = tf.Gemma3Config(
            text_config=text, vision_config=SIGLIP_VISION, mm_tokens_per_image=4
        )
        cls = tf.Gemma3ForConditionalGeneration
    elif kind == "qwen2":
        cls, config = tf.Qwen2ForCausalLM, tf.Qwen2Config(**TEXT, tie_word_embeddings=tie)
    else:
        cls, config = tf.LlamaForCausalLM, tf.LlamaConfig(**TEXT, tie_word_embeddings=tie)
    torch.manual_seed(0)
    with torch.device(device):
        return cls(config)
