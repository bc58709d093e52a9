"""Model components: which part of a model each parameter or module belongs to.

Pure functions over names (no torch import), so the planner can use them on names alone.
Every policy (freeze, LoRA, quantization, reports) speaks in these components.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from recipe_engine.errors import RecipeError, did_you_mean

COMPONENTS = ("vision_tower", "projector", "language_model", "embeddings", "lm_head")
OTHER = "other"
#: Components in report order, with the catch-all last.
ALL_COMPONENTS = (*COMPONENTS, OTHER)


@dataclass(frozen=True)
class Architecture:
    """How one family of models lays out its parameters.

    ``rules`` are ``(component, regex)`` pairs tried in order with ``re.match`` on the
    canonical name; the first match wins, so nested parts (the projector inside
    Qwen2-VL's ``visual``, the embeddings inside the language model) come first.
    """

    name: str
    model_types: tuple[str, ...]
    rules: tuple[tuple[str, str], ...]


# `(\.|$)` ends every rule so that `lm_head` never matches `lm_head_extra`.
# The legacy (transformers 4.x checkpoint) names are kept because checkpoints on disk and
# old adapter files still use them; transformers 5 renames them only when loading.
_QWEN_VL_RULES = (
    ("projector", r"(model\.)?visual\.merger(\.|$)"),
    ("vision_tower", r"(model\.)?visual(\.|$)"),
    ("embeddings", r"model\.(language_model\.)?embed_tokens(\.|$)"),
    ("language_model", r"model\.language_model(\.|$)"),
    ("language_model", r"model\.(layers|norm|rotary_emb)(\.|$)"),  # 4.x checkpoint names
    ("lm_head", r"lm_head(\.|$)"),
)

# Decoder-only text models laid out as `model.embed_tokens`, `model.layers`, `lm_head`
# (checked on transformers 5.23 by building each on the meta device).
_TEXT_MODEL_TYPES = tuple(
    "llama mistral ministral mixtral qwen2 qwen2_moe qwen3 qwen3_moe gemma gemma2 gemma3_text"
    " phi phi3 olmo olmo2 granite starcoder2 stablelm cohere deepseek_v3 smollm3 gpt_oss".split()
)

ARCHITECTURES: dict[str, Architecture] = {
    "qwen2_vl": Architecture("qwen2_vl", ("qwen2_vl",), _QWEN_VL_RULES),
    "qwen2_5_vl": Architecture("qwen2_5_vl", ("qwen2_5_vl",), _QWEN_VL_RULES),
    "llava": Architecture(
        "llava",
        ("llava",),
        (
            ("vision_tower", r"(model\.)?vision_tower(\.|$)"),
            ("projector", r"(model\.)?multi_modal_projector(\.|$)"),
            ("embeddings", r"(model\.language_model|language_model\.model)\.embed_tokens(\.|$)"),
            ("language_model", r"(model\.language_model|language_model\.model)(\.|$)"),
            ("lm_head", r"(language_model\.)?lm_head(\.|$)"),
        ),
    ),
    "causal_lm": Architecture(
        "causal_lm",
        _TEXT_MODEL_TYPES,
        (
            ("embeddings", r"model\.embed_tokens(\.|$)"),
            ("language_model", r"model(\.|$)"),
            ("lm_head", r"lm_head(\.|$)"),
        ),
    ),
}

# PEFT, DDP and torch.compile wrap names; components are decided on the unwrapped name.
_PREFIXES = ("base_model.model.", "module.", "_orig_mod.")
_SEGMENTS = re.compile(r"\.(modules_to_save\.[^.]+|original_module|base_layer)(?=\.|$)")


def canonical_name(name: str) -> str:
    """The parameter/module name as in the bare transformers model.

    Strips ``base_model.model.`` (PeftModel), ``module.`` (DDP), ``_orig_mod.``
    (torch.compile) and the ``modules_to_save.<adapter>`` / ``original_module`` /
    ``base_layer`` segments PEFT inserts. LoRA's own ``lora_A.<adapter>`` stays: it is
    a real parameter and belongs to the component of the layer it adapts.
    """
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                stripped = True
    return _SEGMENTS.sub("", name)


def architecture_of(model_type: str) -> str:
    """Map ``config.model_type`` to a key of :data:`ARCHITECTURES`."""
    for key, arch in ARCHITECTURES.items():
        if model_type in arch.model_types:
            return key
    known = sorted(t for arch in ARCHITECTURES.values() for t in arch.model_types)
    raise RecipeError(
        f"Model type `{model_type}` has no component map, so freeze/LoRA/quantization "
        f"components cannot be resolved for it.{did_you_mean(model_type, known)} "
        f"Known model types: {', '.join(known)}. For another model, select parameters by "
        "name with `freeze.patterns` (regexes) and list LoRA `target_modules` explicitly.",
        key="model",
    )


@cache
def _compiled(architecture: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    if architecture not in ARCHITECTURES:
        raise RecipeError(
            f"Unknown architecture `{architecture}`.{did_you_mean(architecture, ARCHITECTURES)}"
            f" Known: {', '.join(ARCHITECTURES)}.",
            key="model.architecture",
        )
    return tuple((comp, re.compile(rx)) for comp, rx in ARCHITECTURES[architecture].rules)


def component_of(name: str, architecture: str) -> str:
    """The component of a parameter or module name, or ``"other"`` when no rule matches.

    For a container module spanning several components (Qwen2-VL's ``model.visual``
    holds the projector) the answer is the outer rule's; decide on leaf names.
    """
    canonical = canonical_name(name)
    for comp, rx in _compiled(architecture):
        if rx.match(canonical):
            return comp
    return OTHER


def validate_components(names: Iterable[str], key: str) -> None:
    """Raise a RecipeError naming ``key`` for anything that is not a component name."""
    if isinstance(names, str):
        # A bare string would otherwise be iterated character by character.
        raise RecipeError(f"`{key}` must be a list of components, e.g. [{names}].", key=key)
    for name in names:
        if name not in ALL_COMPONENTS:
            raise RecipeError(
                f"Unknown component `{name}` in `{key}`.{did_you_mean(str(name), ALL_COMPONENTS)}"
                f" Components: {', '.join(ALL_COMPONENTS)}.",
                key=key,
            )


def covering_modules(
    names: Iterable[str], selected: Iterable[str], *, names_are_modules: bool
) -> tuple[list[str], list[str]]:
    """The fewest module names whose subtrees contain selected names only.

    ``names`` are all parameter names (``names_are_modules=False``) or module names of a
    model; ``selected`` is the subset to cover. Returns ``(modules, uncovered)``: the
    outermost modules holding nothing but selected names (used for PEFT
    ``modules_to_save`` and bitsandbytes ``llm_int8_skip_modules``), and the selected
    names no such module can hold (a parameter sitting directly on a mixed container).
    """
    names = [n for n in names if n]
    chosen = set(selected)
    candidates: set[str] = set()
    impure: set[str] = set()
    for name in names:
        # A parameter name's last segment is the tensor, not a module.
        prefixes = _prefixes(name, inclusive=names_are_modules)
        candidates.update(prefixes)
        if name not in chosen:
            impure.update(prefixes)
    pure = candidates - impure
    modules = sorted(p for p in pure if p.rpartition(".")[0] not in pure)
    present = set(names)
    uncovered = sorted(
        n for n in chosen & present if not any(p in pure for p in _prefixes(n, inclusive=True))
    )
    return modules, uncovered


def _prefixes(name: str, *, inclusive: bool) -> list[str]:
    parts = name.split(".")
    upto = len(parts) if inclusive else len(parts) - 1
    return [".".join(parts[:k]) for k in range(1, upto + 1)]
