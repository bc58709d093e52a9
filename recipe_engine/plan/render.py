"""The `plan` verb's text: per stage in order, what it loads, reads, trains and where."""

from __future__ import annotations

from recipe_engine.config.components import OTHER
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.plan.dag import short
from recipe_engine.plan.placement import describe
from recipe_engine.plan.recipe_plan import RecipePlan, StagePlan
from recipe_engine.plugins import listing


def render_plan(plan: RecipePlan) -> str:
    lines = [f"recipe {plan.recipe}  ({len(plan.stages)} stage(s), hardware: {plan.hardware})"]
    if listing():
        lines.append(f"plug-ins: {listing()}")
    for index, name in enumerate(plan.graph.order, 1):
        stage = plan.stages[name]
        lines += ["", *_stage_lines(index, stage, _merge_lines(plan, stage))]
        if launcher_kind(plan.config.launcher).scheduled:
            job = plan.jobs.get(name)
            left_out = "job: none (in the store, or left out by `only`)"
            lines.append(f"    {job.describe() if job else left_out}")
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)


def _stage_lines(index: int, stage: StagePlan, merge: list[str]) -> list[str]:
    parent = f"  parent: {stage.parent}" if stage.parent else ""
    parent += "".join(f"  {role}: {source}" for role, source in stage.inputs.items())
    policy = stage.policy
    return [
        f"[{index}] stage {stage.name}  key {short(stage.fingerprint)}{parent}",
        f"    init:      {stage.init.description}",
        *merge,
        *_revision_lines(stage),
        f"    data:      {stage.data.describe()}",
        f"    layout:    {policy.layout.name if policy.layout else '(read when the model loads)'}",
        f"    frozen:    {_frozen_text(stage)}",
        f"    trained:   {_trained_text(stage)}",
        f"    lora:      {_lora_text(stage)}",
        f"    quantized: {_quant_text(stage)}",
        f"    dtype:     {stage.dtype}: {stage.precision.describe()}",
        *(f"    {line}" for line in describe(stage.placement)),
        f"    weights:   {stage.determinism.describe()}",
        *(f"    {line}" for line in _memory_lines(stage)),
        *(f"    note: {note}" for note in stage.notes),
    ]


def _merge_lines(plan: RecipePlan, stage: StagePlan) -> list[str]:
    """The merge_parent step, where there is one: a LoRA adapter the stage starts from is
    merged into its base before loading (never into a quantized model), then verified."""
    parent = plan.parent_of(stage)
    if parent is not None and parent.policy.lora is not None:
        what = f"stage `{parent.name}`'s LoRA adapter"
    elif stage.init.adapter:
        what = "the adapter `init` names"
    else:
        return []
    return [
        f"    merge:     {what} into its base in {stage.dtype} before loading (kept in the "
        "store, checked against the adapter's logits)"
    ]


def _revision_lines(stage: StagePlan) -> list[str]:
    """A hub model's and hub data's commits, and whether each is pinned, given or resolved
    now."""
    model, data = stage.init.hub_revision, stage.data.hub_revision
    return [
        *([f"    revision:  {model.describe()}"] if model else []),
        *([f"    data rev:  {data.describe()}"] if data else []),
    ]


def _frozen_text(stage: StagePlan) -> str:
    policy = stage.policy
    patterns = [f"/{p}/" for p in policy.freeze_patterns]
    return ", ".join([*policy.frozen, *patterns]) or "-"


def _trained_text(stage: StagePlan) -> str:
    """The fully trained components, each with the share of it that freeze.patterns leave."""
    policy = stage.policy
    parts = []
    for component in policy.trained:
        share = policy.trained_share(component)
        parts.append(component + (f" ({share:.1%}; freeze.patterns)" if share is not None else ""))
    return f"{', '.join(parts) or '-'} (full)"


def _lora_text(stage: StagePlan) -> str:
    lora = stage.policy.lora
    if lora is None:
        return "-"
    count = f", {len(lora.targets)} modules" if lora.targets else ""
    rank = (stage.config.lora or {}).get("r", 8)
    where = ", ".join(lora.components) if lora.components != [OTHER] else "by target_modules"
    return f"{where} (r={rank}{count})"


def _quant_text(stage: StagePlan) -> str:
    quant, placement = stage.policy.quantization, stage.placement
    if quant is None and placement.quantization != "none":  # policy deferred to load time
        return f"{placement.quantization} (modules resolved when the model loads)"
    if quant is None:
        fallback = placement.quantization_fallback
        return f"- (requested quantization skipped: {fallback})" if fallback else "-"
    kind = quant.config.get("bnb_4bit_quant_type", "nf4") if quant.bits == "4bit" else "int8"
    where = ", ".join(quant.components)
    if quant.components == [OTHER]:
        where = "the model bar llm_int8_skip_modules"
    return f"{quant.bits} {kind} on {where}"


def _memory_lines(stage: StagePlan) -> list[str]:
    memory = stage.memory
    if stage.evaluate_only:
        return []
    if memory is None:
        return [
            "memory:    (not estimated: the model's config is not readable here, and no shipped "
            "config snapshot of it fits this stage's policy)"
        ]
    vision, images = memory.request.shape.vision, memory.request.images_per_row
    lines = [f"images:    {vision.describe_images(images)}"] if vision and images else []
    lines.append(f"memory:    {memory.describe()}")
    advice = memory.advice()
    if advice:
        lines.append("warning: it does not fit; change " + ", or ".join(advice))
    return lines
