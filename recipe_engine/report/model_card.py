"""The model card an export carries: `README.md` in the Hugging Face hub's format (YAML
metadata, then Markdown). What a reader of a hub page looks for: the base and its licence, the
recipe and every stage that made the weights (key, what it trained, on what data, how long),
the scores with the probes they come from, and where it ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from recipe_engine.store.records import Manifest
from recipe_engine.trainers import trainer_of

PIPELINE_TAGS = {"causal_lm": "text-generation", "vlm": "image-text-to-text"}


@dataclass(frozen=True)
class CardFacts:
    """What the export decided, as the card states it."""

    form: str  # merged | adapter | full
    base: str  # the base model the weights descend from (hub id, or a local name)
    base_revision: str | None
    adapter_base: str | None = None  # merge=false: what adapter_config.json names


def model_card(lineage: list[Manifest], facts: CardFacts) -> str:
    """`lineage` runs from the root stage to the exported one."""
    final = lineage[-1]
    sections = [
        _front_matter(final, facts),
        f"# {final.recipe}: stage `{final.stage}`",
        _summary(final, facts),
        "## How it was trained",
        _lineage_table(lineage),
        "## Scores",
        _scores(lineage),
        "## Where it ran",
        _platform(final),
        "## Loading it",
        _loading(final, facts),
    ]
    return "\n\n".join(sections) + "\n"


def _front_matter(final: Manifest, facts: CardFacts) -> str:
    meta: dict[str, object] = {
        "base_model": facts.base,
        "library_name": "peft" if facts.form == "adapter" else "transformers",
        "license": final.model.license or "other",
        "pipeline_tag": PIPELINE_TAGS.get(final.kind, "text-generation"),
        "tags": ["recipe-engine", final.recipe, *(["lora"] if facts.form == "adapter" else [])],
    }
    return f"---\n{yaml.safe_dump(meta, sort_keys=False).strip()}\n---"


def _summary(final: Manifest, facts: CardFacts) -> str:
    at = f" at revision `{facts.base_revision}`" if facts.base_revision else ""
    forms = {
        "merged": "the stage's LoRA adapter merged into its base, in the base's dtype "
        f"({final.dtype}); the merge was checked against the adapter's logits "
        "(`export.json`)",
        "full": f"the stage's full weights ({final.dtype})",
        "adapter": f"the stage's LoRA adapter; `adapter_config.json` names its base "
        f"`{facts.adapter_base}`",
    }
    licence = final.model.license
    licence_line = (
        f"Licence: the base's, `{licence}`."
        if licence
        else "Licence: the base model's; see its own card (the model entry names none)."
    )
    return (
        f"Fine-tuned from `{facts.base}`{at} by recipe-engine's recipe `{final.recipe}`. "
        f"This folder holds {forms[facts.form]}.\n\n{licence_line}"
    )


def _lineage_table(lineage: list[Manifest]) -> str:
    rows = [
        [
            m.stage,
            f"`{m.fingerprint[:12]}`",
            trainer_of(m.config).name,
            m.trained_text() or "-",
            _data_text(m),
            str(m.metrics.steps if m.metrics.steps is not None else "-"),
            m.metrics.loss_text(),
        ]
        for m in lineage
    ]
    header = ["stage", "key", "trainer", "trained", "data", "steps", "train loss"]
    return _markdown_table(header, rows)


def _data_text(manifest: Manifest) -> str:
    data = manifest.data
    name = data.get("name") or data.get("path") or data.get("source") or "-"
    rows = data.get("train_rows")
    return f"{name} ({rows} rows)" if rows else str(name)


def _scores(lineage: list[Manifest]) -> str:
    rows = []
    for m in lineage:
        metrics = m.metrics
        if metrics.eval_accuracy is None and metrics.eval_loss is None:
            continue
        base = f"{metrics.base_accuracy:.0%}" if metrics.base_accuracy is not None else "-"
        rows.append([m.stage, metrics.eval_text(), base, str(metrics.eval_samples or "-")])
    if not rows:
        return "No held-out evaluation was recorded for these stages."
    table = _markdown_table(["stage", "held-out", "base, same rows", "probes"], rows)
    return (
        f"{table}\n\nHeld-out accuracy is exact match of greedy answers on rows the stage never "
        "trained on (the recipe's evaluation split); the loss is on the same rows."
    )


def _platform(final: Manifest) -> str:
    platform = final.platform.describe() if final.platform else "not recorded"
    return f"{platform}. Trained in {final.dtype}, world size {final.world_size}."


def _loading(final: Manifest, facts: CardFacts) -> str:
    auto = "AutoModelForImageTextToText" if final.kind == "vlm" else "AutoModelForCausalLM"
    if facts.form != "adapter":
        lines = [f"from transformers import {auto}", f'model = {auto}.from_pretrained("FOLDER")']
    elif final.kind != "vlm":
        lines = [
            "from peft import AutoPeftModelForCausalLM",
            'model = AutoPeftModelForCausalLM.from_pretrained("FOLDER")',
        ]
    else:
        lines = [
            "from peft import PeftModel",
            f"from transformers import {auto}",
            f'base = {auto}.from_pretrained("{facts.adapter_base}")',
            'model = PeftModel.from_pretrained(base, "FOLDER")',
        ]
    return "```python\n" + "\n".join(lines) + "\n```\n\nFOLDER is this folder."


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    ruled = [f"| {' | '.join(header)} |", f"|{'|'.join('---' for _ in header)}|"]
    return "\n".join(ruled + [f"| {' | '.join(row)} |" for row in rows])
