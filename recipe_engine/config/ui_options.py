"""`ui`'s own keys (`ui.host=`, `ui.port=`, `ui.max_upload_mb=`) as a typed structured config,
composed by Hydra with the engine's, as `compare`'s are (config.compare): Hydra checks the
types, and a misspelt key is refused with the engine's unknown-key message."""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from recipe_engine.config.compose import CONFIG_NAME, compose_config, to_engine_config
from recipe_engine.config.schema import EngineConfig
from recipe_engine.errors import RecipeError

UI_CONFIG = "ui"
DEFAULT_HOST = "127.0.0.1"  # this machine only: another address is asked for, with a warning
DEFAULT_PORT = 8765
DEFAULT_MAX_UPLOAD_MB = 10.0  # the largest picture the chat takes


@dataclass
class UiOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB


@dataclass
class UiConfig(EngineConfig):
    """The schema of the `ui` root: the engine's keys (output_root as every verb reads it),
    then ui's own."""

    ui: UiOptions = field(default_factory=UiOptions)


def register_ui_config() -> None:
    store = ConfigStore.instance()
    store.store(name="ui_schema", node=UiConfig)
    store.store(name=UI_CONFIG, node={"defaults": [CONFIG_NAME, "ui_schema", "_self_"]})


def compose_ui(overrides: list[str], extra_dirs: list[str]) -> UiConfig:
    """ui's command line composed by Hydra with the engine's, its own keys checked."""
    register_ui_config()
    composed = compose_config(overrides, extra_dirs=extra_dirs, config_name=UI_CONFIG)
    config = to_engine_config(composed)
    assert isinstance(config, UiConfig), type(config)
    if not 1 <= config.ui.port <= 65535:
        raise RecipeError(
            f"`ui.port={config.ui.port}` is not a port: give a number from 1 to 65535.",
            key="ui.port",
        )
    if not 0 < config.ui.max_upload_mb <= 1024:
        raise RecipeError(
            f"`ui.max_upload_mb={config.ui.max_upload_mb}`: give the largest picture the chat "
            "takes, in MiB, above 0 and at most 1024.",
            key="ui.max_upload_mb",
        )
    config.ui.host = config.ui.host or DEFAULT_HOST
    return config
