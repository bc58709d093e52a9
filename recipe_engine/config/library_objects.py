"""The libraries' settings objects, built in one place: SFTConfig, LoraConfig, BitsAndBytesConfig.

`run` builds them to train. `plan` builds the same objects from the same arguments in a
clean child process (`python -m recipe_engine.config.library_objects`), so the libraries
themselves judge every combination before a weight loads, without the child's imports
(seconds) or the device state that `SFTConfig` sets up touching the planning process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# bitsandbytes arguments that name a torch dtype: plans keep the name, the library wants it.
DTYPE_KEYS = ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage")
# What a child process checks: the class name -> how to build it from plain arguments.
CLASSES = ("SFTConfig", "LoraConfig", "BitsAndBytesConfig")


def sft_config(settings: Mapping[str, Any], output_dir: Path | str) -> Any:
    from trl import SFTConfig

    return SFTConfig(**settings, output_dir=str(output_dir))


def lora_config(arguments: Mapping[str, Any]) -> Any:
    import peft

    return peft.LoraConfig(**arguments)


def bnb_config(arguments: Mapping[str, Any]) -> Any:
    import torch
    from transformers import BitsAndBytesConfig

    kwargs = dict(arguments)
    for key in DTYPE_KEYS:
        if key in kwargs:
            kwargs[key] = getattr(torch, str(kwargs[key]).removeprefix("torch."))
    return BitsAndBytesConfig(**kwargs)


def judge(stages: list[dict[str, Any]]) -> dict[str, str]:
    """The first refusal among the stages' settings: {stage, class, error}, or {} if none."""
    build = {
        "SFTConfig": lambda a: sft_config(a, Path("unused-output-dir")),
        "LoraConfig": lora_config,
        "BitsAndBytesConfig": bnb_config,
    }
    for stage in stages:
        for class_name in CLASSES:
            arguments = stage.get(class_name)
            if arguments is None:
                continue
            try:
                build[class_name](arguments)
            except (ValueError, TypeError, AttributeError, ImportError) as error:
                return {"stage": stage["stage"], "class": class_name, "error": str(error)}
        refusal = _reporting_refusal(stage)
        if refusal:
            return refusal
    return {}


def _reporting_refusal(stage: dict[str, Any]) -> dict[str, str]:
    """`report_to` names integrations SFTConfig accepts but the Trainer fails on when their
    package is missing: refuse those here."""
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    report_to = (stage.get("SFTConfig") or {}).get("report_to") or "none"
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    missing = [
        n for n in names if n not in ("none", "all", *get_available_reporting_integrations())
    ]
    if not missing:
        return {}
    return {
        "stage": stage["stage"],
        "class": "SFTConfig",
        "error": f"report_to: the package of the `{missing[0]}` integration is not installed; "
        f"install it, or remove {missing[0]} from report_to",
    }


if __name__ == "__main__":  # the planner's child process: JSON stages in, JSON verdict out
    print(json.dumps(judge(json.load(sys.stdin))))
