"""Installed versions of the libraries the engine's results depend on."""

from __future__ import annotations

from importlib import metadata

# Recorded in every manifest and printed by `doctor`.
LIBRARIES = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets")


def package_version(dist: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
