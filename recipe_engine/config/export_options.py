"""`export`'s own keys (`to=`, `merge=`, `base=`, `format=`, `push=`, `repo=`, `register=`,
`registered_model=`) as a typed structured config, composed by Hydra with the engine's, as
`compare`'s and `ui`'s are: Hydra checks the types, and a misspelt key is refused with the
engine's unknown-key message, which lists export's keys too. The stage or run to export is the
one word without `=` (a path is not an override); what the keys mean together is checked here.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from hydra.core.config_store import ConfigStore

from recipe_engine.config.compose import CONFIG_NAME, compose_config, to_engine_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError

EXPORT_CONFIG = "export"
FORMATS = ("hf", "gguf")
GGUF_HOWTO = (
    "`format=gguf`: no maintained Hugging Face to GGUF converter installs from the package "
    "index (llama.cpp's convert_hf_to_gguf.py ships with its sources only). Export the merged "
    "folder, then convert it with llama.cpp:\n"
    "  python -m recipe_engine export {target} to=DIR\n"
    "  git clone https://github.com/ggml-org/llama.cpp\n"
    "  pip install -r llama.cpp/requirements/requirements-convert_hf_to_gguf.txt\n"
    "  python llama.cpp/convert_hf_to_gguf.py DIR --outfile DIR.gguf --outtype f16"
)


@dataclass
class ExportKeys:
    """export's own keys; none of them reaches a recipe's config."""

    to: str | None = None  # where to write (default: outputs/exports/<recipe>-<stage>-...)
    merge: bool = True  # merged weights, standalone; false: the LoRA adapter alone
    base: str | None = None  # merge=false on a local base: the base the adapter names
    format: str = "hf"  # hf (a save_pretrained folder); gguf says what to run
    push: bool = False  # upload the folder with huggingface_hub
    repo: str | None = None  # ORG/NAME, with push=true
    register: bool | None = None  # an MLflow model version; unset: MLFLOW_TRACKING_URI set
    registered_model: str | None = None  # unset: <recipe>-<stage>


@dataclass
class ExportConfig(ExportKeys, EngineConfig):
    """The schema of the `export` root: the engine's keys (output_root, where store keys are
    looked up), then export's own."""


@dataclass(frozen=True)
class ExportOptions:
    """What `export` was asked, checked: the target as given, its keys typed."""

    target: str
    to: Path | None = None
    merge: bool = True
    base: str | None = None
    push: bool = False
    repo: str | None = None
    register: bool = False  # as an MLflow model version
    registered_model: str | None = None  # None: <recipe>-<stage>
    output_root: Path = Path("outputs")


def register_export_config() -> None:
    store = ConfigStore.instance()
    store.store(name="export_schema", node=ExportConfig)
    store.store(name=EXPORT_CONFIG, node={"defaults": [CONFIG_NAME, "export_schema", "_self_"]})


def compose_export(target: str, overrides: list[str], extra_dirs: list[str]) -> ExportOptions:
    """export's keys composed by Hydra with the engine's, then checked together."""
    register_export_config()
    composed = compose_config(overrides, extra_dirs=extra_dirs, config_name=EXPORT_CONFIG)
    config = to_engine_config(composed)
    assert isinstance(config, ExportConfig), type(config)
    keys = ExportKeys(**{f.name: getattr(config, f.name) for f in fields(ExportKeys)})
    if keys.format == "gguf":
        raise RecipeError(GGUF_HOWTO.format(target=target), key="format")
    if keys.format not in FORMATS:
        raise RecipeError(f"`format={keys.format}`: use hf or gguf.", key="format")
    if keys.push and not (keys.repo and re.fullmatch(r"[\w.-]+/[\w.-]+", keys.repo)):
        raise RecipeError("`push=true` needs `repo=ORG/NAME` (the hub repository).", key="repo")
    return ExportOptions(
        target=target,
        to=Path(keys.to).expanduser() if keys.to else None,
        merge=keys.merge,
        base=keys.base,
        push=keys.push,
        repo=keys.repo,
        register=registering(keys),
        registered_model=keys.registered_model,
        output_root=Path(config.output_root).expanduser(),
    )


def registering(keys: ExportKeys) -> bool:
    """`register=`, by default whether MLFLOW_TRACKING_URI names a tracking server (as it
    turns MLflow on for transformers); checked for mlflow before anything is written."""
    register = (
        bool(os.environ.get("MLFLOW_TRACKING_URI")) if keys.register is None else keys.register
    )
    if register and importlib.util.find_spec("mlflow") is None:
        raise RecipeError(
            "`register=true` (MLFLOW_TRACKING_URI is set, or register= was given) needs "
            "MLflow: pip install 'recipe-engine[mlflow]', or register=false.",
            key="register",
        )
    if keys.registered_model is not None and not register:
        raise RecipeError("`registered_model=` names the model `register=true` registers.")
    return register
