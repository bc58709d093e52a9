"""Warm the caches `make install` leaves behind: tiny models and data, field tables, plans.

Run once after installing (`python -m tools.warm`): it builds the embedded tiny models
and datasets and plans every shipped recipe, so the first `plan` or `run` a user types does
not pay for TRL's import (the SFTConfig field table) or the meta-model checks.
"""

from __future__ import annotations

from recipe_engine.config.compose import available, compose_config
from recipe_engine.resolve.machine import detect_machine
from recipe_engine.resolve.tiny import TINY_DATASETS, TINY_MODELS, build_dataset, build_tiny_model
from recipe_engine.run.planning import plan_from_config


def main() -> None:
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
