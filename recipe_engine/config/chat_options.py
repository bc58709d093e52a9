"""`chat`'s own keys as a typed structured config, composed by Hydra with the engine's, as
`compare`'s and `export`'s are: Hydra checks the types and a misspelt key is refused with the
engine's unknown-key message, which lists chat's keys too.

The stage to talk to is the one word without `=`. `prompt=`, `system=` and `image=` are free
text (a question has commas, brackets and quotes that Hydra's grammar would read as a sweep or
a list), so their values are taken as typed, after the first `=`, and never parsed by Hydra;
they are in the schema so that the unknown-key message names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore

from recipe_engine.config.compare import EvalOverrides, override_keys
from recipe_engine.config.compose import CONFIG_NAME, compose_config, to_engine_config
from recipe_engine.config.schema import EngineConfig, EvalConfig
from recipe_engine.errors import RecipeError

CHAT_CONFIG = "chat"
# Keys whose values are taken as typed (free text), not parsed by Hydra.
TEXT_KEYS = ("prompt", "system", "image")
_EVAL_KEYS = frozenset(EvalConfig.__dataclass_fields__)


@dataclass
class ChatKeys:
    """chat's own keys; none of them reaches a recipe's config."""

    prompt: str | None = None  # one question: its answer is printed, then chat exits
    system: str | None = None  # a system turn before every question
    image: str | None = None  # a picture for a vision-language stage (a file)
    # Questions as JSON lines on stdin, answers as JSON lines on stdout (the web view's
    # chat worker speaks this).
    jsonl: bool = False


@dataclass
class ChatConfig(ChatKeys, EngineConfig):
    """The schema of the `chat` root: the engine's keys (output_root, where store keys are
    looked up; eval.*, how answers are generated; seed), then chat's own."""


@dataclass(frozen=True)
class ChatOptions:
    """What `chat` was asked, checked: the stage as given, its keys typed."""

    target: str
    prompt: str | None = None
    system: str | None = None
    image: Path | None = None
    jsonl: bool = False
    # eval.* given on the command line: they win over the run's own settings, as compare's do
    settings: EvalOverrides | None = None
    seed: int | None = None  # given on the command line (None: the run's own)
    output_root: Path = Path("outputs")


def register_chat_config() -> None:
    store = ConfigStore.instance()
    store.store(name="chat_schema", node=ChatConfig)
    store.store(name=CHAT_CONFIG, node={"defaults": [CONFIG_NAME, "chat_schema", "_self_"]})


def split_text_keys(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(prompt/system/image as typed, the other words) from chat's arguments."""
    text: dict[str, str] = {}
    rest = []
    for word in words:
        key, equals, value = word.partition("=")
        if equals and key in TEXT_KEYS:
            text[key] = value
        else:
            rest.append(word)
    return text, rest


def compose_chat(
    target: str, text: dict[str, str], overrides: list[str], extra_dirs: list[str]
) -> ChatOptions:
    """chat's keys composed by Hydra with the engine's (`text`: the free-text keys, taken as
    typed), then checked together."""
    register_chat_config()
    composed = compose_config(overrides, extra_dirs=extra_dirs, config_name=CHAT_CONFIG)
    config = to_engine_config(composed)
    assert isinstance(config, ChatConfig), type(config)
    keys = set(override_keys(overrides)) if overrides else set()
    given = frozenset(key.removeprefix("eval.") for key in keys) & _EVAL_KEYS
    if config.jsonl and text.get("prompt") is not None:
        raise RecipeError(
            "`jsonl=true` reads its questions from stdin; drop `prompt=` (or drop jsonl=true "
            "for one answer).",
            key="prompt",
        )
    for key, value in text.items():
        if not value.strip():
            raise RecipeError(f"`{key}=` is empty: write {key}=TEXT (or leave it out).", key=key)
    return ChatOptions(
        target=target,
        prompt=text.get("prompt"),
        system=text.get("system"),
        image=Path(text["image"]).expanduser() if "image" in text else None,
        jsonl=config.jsonl,
        settings=EvalOverrides(config.eval, given) if given else None,
        seed=config.seed if "seed" in keys else None,
        output_root=Path(config.output_root).expanduser(),
    )
