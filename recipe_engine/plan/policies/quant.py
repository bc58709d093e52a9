"""Quantization policy: bitsandbytes 4/8-bit on chosen components only.

The ``quantization`` mapping holds ``BitsAndBytesConfig`` keys plus our ``components``
(default ``["language_model"]``) and ``on_unsupported`` (``error`` | ``skip``). Everything
outside ``components`` (vision tower, projector, lm_head by default) stays unquantized:
we pass bitsandbytes an explicit ``llm_int8_skip_modules``, which in transformers 5
*replaces* its default skips (lm_head, tied weights) rather than adding to them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from recipe_engine.config.components import ALL_COMPONENTS, OTHER, Layout
from recipe_engine.config.library_keys import (
    DEFAULT_QUANT_COMPONENTS,
    ENGINE_QUANT_KEYS,
    dtype_name,
)
from recipe_engine.config.library_objects import DTYPE_KEYS
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import as_layout, component_of, covering_modules
from recipe_engine.plan.policies.freeze import compile_patterns
from recipe_engine.plan.recipe_plan import QuantPlan


def quantization_plan(
    quant: Mapping,
    *,
    layout: Layout | str,
    module_names: Sequence[str],
    trained: Sequence[str],
) -> QuantPlan:
    """The ``BitsAndBytesConfig`` arguments that quantize ``quantization.components`` only.

    ``module_names``: the model's module names (`ModelInventory.module_names()`, or just its
    linear layers, `names_of(LINEAR)`).
    ``trained``: the components the stage trains *in full* (not frozen, not LoRA);
    quantizing one of them is a RecipeError, since k-bit weights cannot be trained.
    Dtypes stay names here (`bfloat16`); `run.policies.bnb_config` makes them torch dtypes.
    """
    # Without a component map the whole model is `other`: quantize it, bar the user's skips.
    default = DEFAULT_QUANT_COMPONENTS if as_layout(layout).mapped else [OTHER]
    components = list(quant.get("components", default))
    clash = [c for c in components if c in set(trained)]
    if clash:
        raise RecipeError(
            f"`quantization.components` includes {', '.join(clash)}, which this stage trains "
            "in full; quantized weights cannot be trained. Freeze it (`freeze.components`), "
            "train it through LoRA (`lora.components`), or stop quantizing it.",
            key="quantization.components",
        )
    names = [n for n in module_names if n]
    present = {component_of(n, layout) for n in names}
    absent = [c for c in components if c not in present]
    if absent:
        raise RecipeError(
            f"`quantization.components` includes {', '.join(absent)}, which this "
            f"{as_layout(layout).name} model does not have "
            f"(it has {', '.join(c for c in ALL_COMPONENTS if c in present)}).",
            key="quantization.components",
        )
    keep = [n for n in names if component_of(n, layout) not in components]
    skip, _ = covering_modules(names, keep, names_are_modules=True)
    # A user's own skips come on top (they can only keep more in full precision).
    user_skip = list(quant.get("llm_int8_skip_modules") or [])
    _check_skips(user_skip, names)
    config = {k: v for k, v in quant.items() if k not in ENGINE_QUANT_KEYS}
    for key in DTYPE_KEYS:
        if key in config:
            config[key] = dtype_name(config[key])
    config["llm_int8_skip_modules"] = user_skip + [s for s in skip if s not in user_skip]
    bits = "4bit" if quant.get("load_in_4bit") else "8bit"
    return QuantPlan(bits, components, config)


def _check_skips(skips: Sequence[str], module_names: Sequence[str]) -> None:
    """Every `llm_int8_skip_modules` entry keeps some module out of quantization, matched the
    way transformers matches it (from the start of the name up to a dot, or as a suffix)."""
    # transformers reads each entry as a regex too: one that does not compile is refused here.
    compile_patterns(skips, "quantization.llm_int8_skip_modules")
    ordered = sorted(module_names)
    # Leaves: bitsandbytes replaces layers, so matching only a container keeps nothing out.
    # In sorted order a module's children follow it directly ("." sorts before [0-9A-Z_a-z]).
    following = [*ordered[1:], ""]
    leaves = [
        n for n, after in zip(ordered, following, strict=True) if not after.startswith(n + ".")
    ]
    for skip in skips:
        if not any(skipped_by(name, skip) for name in leaves):
            near = [n for n in ordered if f".{skip}." in f".{n}."][:1]
            hint = f" Did you mean `{near[0]}`?" if near else ""
            raise RecipeError(
                f"`quantization.llm_int8_skip_modules` entry {skip!r} matches no module: "
                "transformers matches an entry from the start of a module name (up to a dot) "
                f"or as its suffix.{hint}",
                key="quantization.llm_int8_skip_modules",
            )


def skipped_by(module: str, skip: str) -> bool:
    """Whether transformers keeps `module` out of quantization for a skip entry: the entry
    matches from the start of the name up to a module boundary (as a regex), or as a suffix.

    A copy of transformers 5.23's rule, so that plan decides without importing it:
    quantizers/quantizers_utils.py `should_convert_module(full_name, patterns)` returns
    ``not any(re.match(rf"(?:{key}){boundary}", full_name) or full_name.endswith(key)
    for key in patterns)`` with ``boundary = r"(?:(?<=\\.)|(?=\\.|$))"``;
    tests/plan/policies/test_quant_skip_rule.py compares the two.
    """
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    return bool(re.match(rf"(?:{skip}){boundary}", module)) or module.endswith(skip)
