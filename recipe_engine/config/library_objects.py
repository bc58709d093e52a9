"""The libraries' settings objects, built in one place: SFTConfig, LoraConfig, BitsAndBytesConfig.

`run` builds them to train. `plan` builds the same objects from the same arguments in a
clean child process (`judge`, in a child of `config.library_judge`), so the libraries
themselves judge every combination before a weight loads, without their imports (seconds)
or the device state that `SFTConfig` sets up touching the planning process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipe_engine.trainers import DEFAULT, TRAINERS

# Keyword arguments handed as they are to a library's settings class (SFTConfig, LoraConfig,
# BitsAndBytesConfig): the library defines their keys, the engine checks them (library_keys).
LibraryKwargs = dict[str, Any]

# bitsandbytes arguments that name a torch dtype: plans keep the name, the library wants it.
DTYPE_KEYS = ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage")
DEFAULT_CLASS = DEFAULT.settings_class


def trainer_classes() -> tuple[str, ...]:
    """The trainer kinds' settings classes (a plug-in's too)."""
    return tuple(dict.fromkeys(kind.settings_class for kind in TRAINERS.values()))


# `report_to` integrations the engine offers as extras: pip install 'recipe-engine[<name>]'.
ENGINE_EXTRAS = ("tensorboard", "wandb", "mlflow")
# The other integrations transformers knows -> what to pip install for them (transformers'
# integrations/integration_utils.py, is_*_available).
INTEGRATION_PACKAGES = {
    "azure_ml": "azureml-core",
    "clearml": "clearml",
    "codecarbon": "codecarbon",
    "comet_ml": "comet_ml",
    "dagshub": "dagshub mlflow",
    "dvclive": "dvclive",
    "flyte": "flytekit flytekitplugins-deck-standard",
    "neptune": "neptune",
    "swanlab": "swanlab",
    "trackio": "trackio",
}


def trainer_config(class_name: str, settings: Mapping[str, Any], output_dir: Path | str) -> Any:
    """A trainer kind's settings object (`TrainerKind.settings_class`) from plain arguments."""
    import importlib
    import os

    module = next(k.module for k in TRAINERS.values() if k.settings_class == class_name)
    if module.startswith("trl.experimental"):  # `plan` notes it; the import would warn
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    settings_class = getattr(importlib.import_module(module), class_name)
    return settings_class(**settings, output_dir=str(output_dir))


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


def judge(stages: list[Mapping[str, Any]]) -> dict[str, str]:
    """The first refusal among the stages' settings, or {} if none: {stage, class, error} with
    a library's own words, or {stage, class, key, message} with the engine's."""
    build = {
        **{
            name: lambda a, n=name: trainer_config(n, a, Path("unused-output-dir"))
            for name in trainer_classes()
        },
        "LoraConfig": lora_config,
        "BitsAndBytesConfig": bnb_config,
    }
    for stage in stages:
        for class_name in (*trainer_classes(), "LoraConfig", "BitsAndBytesConfig"):
            arguments = stage.get(class_name)
            if arguments is None:
                continue
            try:
                build[class_name](arguments)
            except (ValueError, TypeError, AttributeError, ImportError) as error:
                return {"stage": stage["stage"], "class": class_name, "error": str(error)}
        refusal = reporting_refusal(stage)
        if refusal:
            return refusal
    return {}


def reporting_refusal(stage: Mapping[str, Any]) -> dict[str, str]:
    """`report_to` names integrations SFTConfig accepts but the Trainer fails on when their
    package is missing (after the model has loaded): refuse those here, saying what to install."""
    trainer_class = next((c for c in trainer_classes() if stage.get(c) is not None), DEFAULT_CLASS)
    report_to = (stage.get(trainer_class) or {}).get("report_to") or "none"
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    available = available_integrations()
    missing = [n for n in names if n not in ("none", "all", *available)]
    if not missing:
        return {}
    key = f"stage.{stage['stage']}.train.report_to"
    return {
        "stage": stage["stage"],
        "class": trainer_class,
        "key": "report_to",
        "message": f"`{key}` names {missing[0]}, but {_what_to_install(missing[0])}, or "
        f"remove {missing[0]} from {key}.",
    }


def available_integrations() -> set[str]:
    """The `report_to` integrations whose package this environment can import."""
    from transformers.integrations import integration_utils as tracking

    # transformers' own list (what report_to=all means) leaves out flyte, and azure_ml
    # whenever mlflow is installed, though both callbacks work with their package present.
    extra = {
        "flyte": tracking.is_flytekit_available(),
        "azure_ml": tracking.is_azureml_available(),
    }
    listed = tracking.get_available_reporting_integrations()
    return {*listed, *(name for name, present in extra.items() if present)}


def _what_to_install(integration: str) -> str:
    if integration in ENGINE_EXTRAS:
        return f"its package is not installed: pip install 'recipe-engine[{integration}]'"
    if integration == "kubeflow":  # no package: transformers reports only inside a job
        return (
            "it reports only inside a Kubeflow Trainer job (KUBEFLOW_TRAINER_SERVER_URL is unset)"
        )
    package = INTEGRATION_PACKAGES.get(integration, integration)
    return f"its package is not installed: pip install {package}"


def import_libraries() -> None:
    """What judging most plans imports (seconds), done once by the judge before the first
    stages arrive: the planner starts it while still reading models and rows
    (`run.preflight`), and each verdict's child is forked with these imported."""
    import peft  # noqa: F401
    from transformers import BitsAndBytesConfig  # noqa: F401
    from transformers.integrations import integration_utils  # noqa: F401
    from trl import SFTConfig  # noqa: F401
