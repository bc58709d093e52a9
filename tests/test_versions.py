"""The one version reader: installed distributions' versions, None when not installed."""

from __future__ import annotations

from importlib import metadata

from recipe_engine.versions import LIBRARIES, package_version


def test_installed_and_missing_distributions():
    assert package_version("torch") == metadata.version("torch")
    assert package_version("no-such-distribution-anywhere") is None


def test_the_recorded_libraries():
    assert LIBRARIES == (
        "torch",
        "transformers",
        "trl",
        "peft",
        "bitsandbytes",
        "accelerate",
        "datasets",
    )
