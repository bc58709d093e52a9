"""`python -m recipe_engine diff RECIPE_A RECIPE_B [overrides ...] [--all]`: resolved settings
that differ, stage by stage, then outside the stages (model, data, eval, placement, ...).

Each recipe is composed exactly as a run would compose it (`recipe=NAME` + the overrides), with
interpolations resolved. Stages with the same name are compared with each other; the rest are
paired by their position in topological order (parents first), which the output says. A stage
reference (`init.from_stage`) that points at the paired stage counts as equal. Labels that are
not settings (`recipe.name`, `recipe.description`, a stage's `template` and `description`) are
left out; `--all` includes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.config.schema import OPEN_SECTIONS
from recipe_engine.files import JsonObject
from recipe_engine.plan.dag import NON_WEIGHT_STAGE_KEYS, build_graph

USAGE = """\
usage: recipe-engine diff RECIPE_A RECIPE_B [key=value ...] [--all]

  key=value     Hydra overrides applied to both recipes (e.g. model=qwen2-vl-7b)
  a.key=value   an override for RECIPE_A only (b.key=value: RECIPE_B only)
  --all         also show labels that are not settings (recipe name/description, stage
                template/description)
  --config-dir DIR   your own recipes, as for every verb"""

# Labels, not settings: they always differ between two recipes and change nothing trained.
LABEL_KEYS = ("recipe.name", "recipe.description")
STAGE_LABEL_KEYS = tuple(sorted(NON_WEIGHT_STAGE_KEYS))  # template, description


class _Absent:
    """A key one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Change:
    key: str  # dotted, relative to the stage for stage changes
    a: Any
    b: Any


@dataclass
class StagePair:
    a: str | None  # None: the stage exists only in B
    b: str | None
    by: str  # "name" | "position" | "only"
    position: int | None = None  # 1-based topological position when paired by position
    templates: tuple[str | None, str | None] = (None, None)
    changes: list[Change] = field(default_factory=list)


@dataclass
class RecipeDiff:
    a: str
    b: str
    overrides: list[str]
    general: list[Change]  # outside `stage`
    stages: list[StagePair]
    labels: list[Change]  # differing labels (shown with --all)


def diff_recipes(
    a: str, b: str, overrides: Sequence[str] = (), *, extra_dirs: Sequence[str] = ()
) -> RecipeDiff:
    """Compose both recipes and compare their resolved settings."""

    shared: list[str] = []
    own: dict[str, list[str]] = {"a": [], "b": []}
    for override in overrides:
        body = override.lstrip("+~")  # Hydra's append/delete marks go before the side prefix
        marks = override[: len(override) - len(body)]
        if body.startswith(("a.", "b.")):
            own[body[0]].append(marks + body[2:])
        else:
            shared.append(override)
    cfg_a = _composed([f"recipe={a}", *shared, *own["a"]], extra_dirs)
    cfg_b = _composed([f"recipe={b}", *shared, *own["b"]], extra_dirs)

    general, labels = [], []
    rest_a = {k: v for k, v in cfg_a.items() if k != "stage"}
    rest_b = {k: v for k, v in cfg_b.items() if k != "stage"}
    for change in _diff_tree(rest_a, rest_b):
        (labels if change.key in LABEL_KEYS else general).append(change)

    pairs = pair_stages(cfg_a, cfg_b)
    partner = {p.a: p.b for p in pairs if p.a and p.b}
    for pair in pairs:
        stage_a = cfg_a["stage"].get(pair.a, {}) if pair.a else {}
        stage_b = cfg_b["stage"].get(pair.b, {}) if pair.b else {}
        pair.templates = (stage_a.get("template"), stage_b.get("template"))
        parent = (stage_a.get("init") or {}).get("from_stage")
        init_b = stage_b.get("init") or {}
        if parent in partner and init_b.get("from_stage") == partner[parent]:
            # The same edge under the paired names: not a difference.
            stage_b = {**stage_b, "init": {**init_b, "from_stage": parent}}
        for change in _diff_tree(stage_a, stage_b):
            if change.key in STAGE_LABEL_KEYS:
                labels.append(Change(f"stage.{pair.a or pair.b}.{change.key}", change.a, change.b))
            else:
                pair.changes.append(change)
    return RecipeDiff(a, b, list(overrides), general, pairs, labels)


def _composed(overrides: Sequence[str], extra_dirs: Sequence[str]) -> JsonObject:
    """The composed config as plain values: what `diff` compares, key by key."""
    from recipe_engine.config.compose import compose_config, to_plain

    cfg = to_plain(compose_config(overrides, extra_dirs=extra_dirs))
    cfg["stage"] = {name: _without_empty_sections(s) for name, s in cfg["stage"].items()}
    return cfg


def _without_empty_sections(stage: JsonObject) -> JsonObject:
    """A stage's plain values with empty open sections as None (not used), as plans compare
    them (`config.schema.without_empty_sections`)."""
    return {**stage, **{key: stage.get(key) or None for key in OPEN_SECTIONS}}


def pair_stages(cfg_a: Mapping[str, Any], cfg_b: Mapping[str, Any]) -> list[StagePair]:
    """Same names pair by name; the others by topological position among the unpaired."""
    order_a = list(build_graph(cfg_a["stage"], cfg_a["recipe"].get("targets") or []).order)
    order_b = list(build_graph(cfg_b["stage"], cfg_b["recipe"].get("targets") or []).order)
    pairs = [StagePair(n, n, "name") for n in order_a if n in order_b]
    left = [n for n in order_a if n not in order_b]
    right = [n for n in order_b if n not in order_a]
    for x, y in zip(left, right, strict=False):
        position = order_a.index(x) + 1
        pairs.append(StagePair(x, y, "position", position=position))
    pairs += [StagePair(x, None, "only") for x in left[len(right) :]]
    pairs += [StagePair(None, y, "only") for y in right[len(left) :]]
    rank = {n: i for i, n in enumerate(order_a)}
    # A's order first (B-only stages last): parents are read before their children.
    return sorted(pairs, key=lambda p: rank.get(p.a, len(rank) + order_b.index(p.b or "")))


def _diff_tree(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[Change]:
    """Differing leaves, as dotted keys in A's key order (B-only keys after).

    Two mappings are compared key by key; anything else (lists included: their order
    matters) is one value, so `lora: null -> {r: 16, ...}` stays one line.
    """
    changes: list[Change] = []
    for key in list(a) + [k for k in b if k not in a]:
        left, right = a.get(key, ABSENT), b.get(key, ABSENT)
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            changes += _diff_tree(left, right, f"{prefix}{key}.")
        elif left != right:
            changes.append(Change(f"{prefix}{key}", left, right))
    return changes


def _text(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def render_diff(diff: RecipeDiff, *, show_all: bool = False) -> str:
    """The `diff` verb's output."""
    with_overrides = f"  (overrides: {' '.join(diff.overrides)})" if diff.overrides else ""
    lines = [f"diff {diff.a} -> {diff.b}{with_overrides}", ""]
    if diff.general:
        lines.append("outside the stages:")
        lines += [f"  {c.key}: {_text(c.a)} -> {_text(c.b)}" for c in diff.general]
    else:
        lines.append("outside the stages: identical (model, data, eval, placement, ...)")
    for pair in diff.stages:
        lines.append("")
        if pair.by == "only":
            side, name = ("A", pair.a) if pair.a else ("B", pair.b)
            lines.append(f"stage {name}: only in {side} ({diff.a if pair.a else diff.b})")
            continue
        ta, tb = (t or "-" for t in pair.templates)
        if pair.by == "name":
            head = f"stage {pair.a} ({ta} -> {tb})"
        else:
            head = (
                f"stage {pair.a} ({ta}) <-> stage {pair.b} ({tb}): names differ, paired by "
                f"topological position {pair.position}"
            )
        if not pair.changes:
            lines.append(f"{head}: identical")
            continue
        lines.append(f"{head}:")
        lines += [f"  {c.key}: {_text(c.a)} -> {_text(c.b)}" for c in pair.changes]
    lines.append("")
    if show_all:
        lines.append("labels (not settings):")
        lines += [f"  {c.key}: {_text(c.a)} -> {_text(c.b)}" for c in diff.labels] or ["  -"]
    elif diff.labels:
        lines.append(
            f"not shown: {len(diff.labels)} label(s) (recipe name/description, stage "
            "template/description); --all shows them"
        )
    return "\n".join(lines).rstrip()
