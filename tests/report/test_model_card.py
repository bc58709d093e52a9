"""The model card's licence is the model entry's `license`, else `other` (docs/export.md): set on
the entry, it travels with the manifest the stage writes to the card an export carries."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import yaml

from recipe_engine.config.compose import compose_config, to_engine_config
from recipe_engine.report.model_card import CardFacts, model_card
from recipe_engine.store.records import Manifest

FACTS = CardFacts(form="full", base="tiny-qwen2-vl", base_revision=None)


def stage_manifest(folder: Path, overrides: list[str]) -> Manifest:
    """A stage's manifest as `run.stage` records the model entry, written and read back."""
    model = to_engine_config(compose_config(["model=tiny-qwen2-vl", *overrides])).model
    fields = dict(stage="llm", recipe="r", fingerprint="f" * 40, format="full", dtype="float32")
    Manifest(**fields, model_entry=asdict(model)).save(folder)
    return Manifest.load(folder)


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---\n", 2)[1])


def test_a_license_set_on_the_model_entry_reaches_the_model_card(tmp_path):
    manifest = stage_manifest(tmp_path, ["model.license=apache-2.0"])
    assert manifest.model.license == "apache-2.0"
    card = model_card([manifest], FACTS)
    assert front_matter(card)["license"] == "apache-2.0"
    assert "Licence: the base's, `apache-2.0`." in card


def test_an_entry_without_a_license_is_carded_as_other(tmp_path):
    card = model_card([stage_manifest(tmp_path, [])], FACTS)
    assert front_matter(card)["license"] == "other"
    assert "the model entry names none" in card
