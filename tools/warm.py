"""Warm the caches `make install` leaves behind: tiny models and data, field tables, plans.

Run once after installing (`python -m tools.warm`): it builds the embedded tiny models
and datasets and plans every shipped recipe, so the first `plan` or `run` a user types does
not pay for TRL's import (the SFTConfig field table) or the meta-model checks.

Each model is built on one thread (`resolve/tiny/models.py`), so the artefacts still missing
are built side by side, one process a core, the longest (the pre-trained VLMs) first: on 2
cores shared with other work, an empty cache's builds took 106 s against 126 s one after
another, back to back (CPU 140 s against 123: each process pays its imports). The artefacts
are byte for byte the ones a sequential build makes (each build is seeded and on one thread;
the lock of `build_once` keeps two builders of one folder from both building it).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from recipe_engine.config.compose import available, compose_config
from recipe_engine.files import default_cache_dir
from recipe_engine.resolve.machine import detect_machine
from recipe_engine.resolve.tiny import TINY_DATASETS, TINY_MODELS, build_dataset, build_tiny_model
from recipe_engine.resolve.tiny.build import VERSION
from recipe_engine.run.planning import plan_from_config

# The builds that take longest (the pre-trained VLMs, about 70 s each on one core), started
# first so the others fill in around them.
LONGEST_FIRST = ("tiny-qwen2.5-vl", "tiny-qwen2-vl", "tiny-idefics3", "tiny-llava",
                 "smollm2-135m", "shapes")  # fmt: skip
# Shipped model entries that are GGUF files, converted once into the cache (about 30 s each):
# planning their recipe converts them anyway; beside the builds, they cost no wall time.
GGUF_MODELS = ("smollm2-135m",)
RANK = {name: i for i, name in enumerate(LONGEST_FIRST)}


def build(kind: str, name: str) -> Path | None:
    """Build (once) the tiny model or dataset `name`, or convert the GGUF entry `name`."""
    if kind == "gguf":
        from omegaconf import OmegaConf

        from recipe_engine.resolve.gguf import gguf_model

        entry = OmegaConf.to_object(compose_config([f"model={name}"]).model)  # a ModelConfig
        return gguf_model(entry).folder
    return build_tiny_model(name) if kind == "model" else build_dataset(name)


def missing() -> list[tuple[str, str]]:
    """The tiny artefacts not in the cache yet, as (kind, name), the longest builds first."""
    root = default_cache_dir()
    wanted = [("model", name) for name in TINY_MODELS] + [("dataset", n) for n in TINY_DATASETS]
    folder = {"model": root / "models", "dataset": root / "data"}
    absent = [(kind, n) for kind, n in wanted if not (folder[kind] / f"{n}-{VERSION}").is_dir()]
    return sorted(absent, key=lambda item: RANK.get(item[1], len(RANK)))


def build_missing() -> None:
    """The missing artefacts, built in a process a core when more than one is missing (spawned:
    a fresh interpreter each, never a fork of a process that may hold torch's threads)."""
    todo = missing()
    if todo:  # a no-op when converted already; never worth a process pool of its own
        todo += [("gguf", name) for name in GGUF_MODELS]
        todo.sort(key=lambda item: RANK.get(item[1], len(RANK)))
    workers = min(os.cpu_count() or 1, len(todo))
    if workers < 2:
        for kind, name in todo:
            build(kind, name)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        for future in [pool.submit(build, kind, name) for kind, name in todo]:
            future.result()


def main() -> None:
    build_missing()
    for name in TINY_MODELS:
        print(f"tiny model {name}: {build_tiny_model(name)}")
    for name in TINY_DATASETS:
        print(f"tiny dataset {name}: {build_dataset(name)}")
    machine = detect_machine()
    for recipe in available("recipe"):
        plan_from_config(compose_config([f"recipe={recipe}"]), machine)
        print(f"recipe {recipe}: checked")


if __name__ == "__main__":
    main()
