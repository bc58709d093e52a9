"""`make install`'s warm-up (`python -m tools.warm`): what it builds is what the engine reads.
The GGUF entry is converted through the same typed model entry planning uses (a plain dict
once reached the converter from here and stopped a fresh install)."""

from __future__ import annotations

from recipe_engine.config.compose import compose_config
from recipe_engine.resolve.gguf import gguf_model
from tools.warm import GGUF_MODELS, build


def test_the_gguf_entries_warm_into_the_folder_planning_reads():
    from omegaconf import OmegaConf

    for name in GGUF_MODELS:
        entry = OmegaConf.to_object(compose_config([f"model={name}"]).model)
        assert build("gguf", name) == gguf_model(entry).folder
