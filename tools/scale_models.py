"""Models with the published dimensions of real families, for `make bench-scale` and the GPU
report's scale steps: the shipped config snapshot of the family's hub model (its layers,
widths, vocabulary, tied embeddings, processor limits), random weights drawn from a fixed seed,
saved in bfloat16, built offline. The tokenizer and chat template are the embedded tiny model's
of the same family (its special tokens' ids written into the config): the hub's tokenizer
cannot be had here, and a tokenizer only decides which ids a row becomes, not the memory or
FLOPs a token costs.

    python -m tools.scale_models build qwen2-vl-2b [--depth N] [--attention A]
        [--device cuda] [--cache-dir DIR]

`--depth` keeps the widths and cuts the layers (a fast test at a real family's widths).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.files import default_cache_dir
from recipe_engine.resolve.resolver import snapshot_folder
from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.resolve.tiny.build import SEED, build_once

VERSION = "v1"
# What a saved tiny model carries beside its weights and config, taken along as it is.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json")  # fmt: skip
# The config ids of special tokens, read from the tiny model of the family.
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id",
             "video_token_id", "vision_start_token_id", "vision_end_token_id")  # fmt: skip


@dataclass(frozen=True)
class ScaleModel:
    """A real family's model: the hub id of its shipped snapshot and its tiny sibling."""

    name: str
    hub_id: str  # whose config snapshot (recipe_engine/resolve/model_snapshots/) gives the shape
    tiny: str  # the embedded tiny model of the same family: tokenizer, template, processor
    kind: str  # vlm | causal_lm

    @property
    def tied(self) -> bool:
        """Whether the family ties lm_head to the embeddings (then a stage freezes both)."""
        return bool(self.snapshot_config().get("tie_word_embeddings"))

    def snapshot_config(self) -> dict:
        return json.loads((self._snapshot() / "config.json").read_text())

    def pixel_limits(self) -> dict[str, int]:
        """The image processor's published pixel limits (min_pixels, max_pixels)."""
        processor = self._snapshot() / "preprocessor_config.json"
        read = json.loads(processor.read_text()) if processor.is_file() else {}
        return {key: int(read[key]) for key in ("min_pixels", "max_pixels") if key in read}

    def _snapshot(self) -> Path:
        folder = snapshot_folder(self.hub_id)
        assert folder is not None, f"no shipped snapshot of {self.hub_id}"
        return folder


SCALE_MODELS = {
    model.name: model
    for model in (
        ScaleModel("qwen2-vl-2b", "Qwen/Qwen2-VL-2B-Instruct", "tiny-qwen2-vl", "vlm"),
        ScaleModel("qwen2-vl-7b", "Qwen/Qwen2-VL-7B-Instruct", "tiny-qwen2-vl", "vlm"),
        ScaleModel("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", "tiny-qwen2", "causal_lm"),
    )
}


@dataclass(frozen=True)
class Variant:
    """How a build departs from the family's published model: layers cut to `depth` (the
    widths kept), an `attention` implementation named in its config.json (which transformers
    loads it with and `plan` reads, e.g. flex_attention for padding-free rows), `device`
    where the random weights are drawn (a 7 B model draws in seconds on a GPU)."""

    depth: int | None = None
    attention: str | None = None
    device: str = "cpu"

    @property
    def suffix(self) -> str:
        depth = f"-depth{self.depth}" if self.depth else ""
        return depth + (f"-{self.attention}" if self.attention else "")


def build_scale_model(
    name: str, variant: Variant = Variant(), cache_dir: Path | None = None
) -> Path:
    """Build (once) the model `name` of SCALE_MODELS as `variant` says; return its folder."""
    model = SCALE_MODELS[name]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "scale" / f"{name}{variant.suffix}-{VERSION}"
    return build_once(folder, lambda target: _build(model, variant, target))


def _build(model: ScaleModel, variant: Variant, target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    tiny = build_tiny_model(model.tiny)
    shape = _shape(model, AutoConfig.from_pretrained(tiny), variant.depth)
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    auto = AutoModelForImageTextToText if model.kind == "vlm" else AutoModelForCausalLM
    with torch.random.fork_rng(devices=[]), torch.device(variant.device):
        torch.manual_seed(SEED)
        built = auto.from_config(config, dtype=torch.bfloat16)
    built.save_pretrained(target)
    if variant.attention:  # from_pretrained loads with what config.json names
        saved = json.loads((target / "config.json").read_text())
        saved["attn_implementation"] = variant.attention
        (target / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (tiny / name).is_file():
            shutil.copy(tiny / name, target / name)
    if model.kind == "vlm":
        _write_processor(tiny, target, model.pixel_limits())


def _shape(model: ScaleModel, tiny: object, depth: int | None) -> dict:
    """The snapshot's config with the tiny sibling's special-token ids (in the text config
    too, where the family nests one) and, with `depth`, fewer layers."""
    shape = model.snapshot_config()
    tiny_config = tiny.to_dict()  # type: ignore[attr-defined]
    tiny_text = tiny_config.get("text_config") or {}
    for key in TOKEN_IDS:
        value = tiny_config.get(key, tiny_text.get(key))
        if value is not None:
            shape[key] = value
    if depth:
        shape["num_hidden_layers"] = depth
        shape["max_window_layers"] = depth
        if "vision_config" in shape:
            shape["vision_config"] = {**shape["vision_config"], "depth": depth}
    return shape


def _write_processor(tiny: Path, target: Path, limits: dict[str, int]) -> None:
    """The tiny sibling's processor at the family's published pixel limits (the tiny one caps
    images at 112x112 px)."""
    size = {"shortest_edge": limits["min_pixels"], "longest_edge": limits["max_pixels"]}
    settings = json.loads((tiny / "processor_config.json").read_text())
    for part in ("image_processor", "video_processor"):
        if part in settings:
            settings[part]["size"] = size
    (target / "processor_config.json").write_text(json.dumps(settings, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.scale_models")
    parser.add_argument("verb", choices=["build"])
    parser.add_argument("name", choices=sorted(SCALE_MODELS))
    parser.add_argument("--depth", type=int, help="keep the widths, cut the layers to N")
    parser.add_argument("--attention", help="the attn_implementation its config.json names")
    parser.add_argument("--device", default="cpu", help="where the random weights are drawn")
    parser.add_argument("--cache-dir", type=Path, help="where to build (default: the engine's)")
    options = parser.parse_args(argv)
    variant = Variant(options.depth, options.attention, options.device)
    print(build_scale_model(options.name, variant, options.cache_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
