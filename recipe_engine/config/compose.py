"""Compose a recipe with Hydra and turn composition failures into one clear message."""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from recipe_engine.config.schema import EngineConfig, StageConfig, register_configs
from recipe_engine.errors import RecipeError, closest, did_you_mean
from recipe_engine.files import JsonObject

# The shipped configs live inside the package, so an installed wheel carries them; Hydra reads
# them through its package source, wherever the package is installed.
CONFIG_PACKAGE = "recipe_engine.conf"
CONFIG_SOURCE = f"pkg://{CONFIG_PACKAGE}"
# The same configs as a folder (the checkout's recipes/ links here), for code that reads files.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"
CONFIG_NAME = "config"
# Config groups a recipe is composed from: `group=option` picks a file of conf/<group>/.
GROUPS = ("recipe", "model", "data", "hardware")


def available(group: str, config_dir: Path | None = None) -> list[str]:
    """Options of a config group: the shipped ones, or those of a user's config folder."""
    folder = files(CONFIG_PACKAGE).joinpath(group) if config_dir is None else config_dir / group
    if not folder.is_dir():
        return []
    names = (p.name for p in folder.iterdir() if p.is_file())
    return sorted(n.removesuffix(".yaml") for n in names if n.endswith(".yaml") and n[0] != ".")


def compose_config(
    overrides: Sequence[str],
    *,
    extra_dirs: Sequence[str] = (),
    with_hydra: bool = False,
    config_name: str = CONFIG_NAME,
) -> DictConfig:
    """The composed config for these overrides, as Hydra's own entry point would build it.

    `extra_dirs` are user config folders (like `--config-dir`) searched before the shipped ones;
    `config_name` is the root config (another than the engine's: `compare`'s, which adds its
    own keys to the engine's).
    """
    register_configs()
    overrides = list(overrides)
    check_config_dirs(extra_dirs)
    check_overrides(overrides, extra_dirs)
    if extra_dirs:
        paths = ",".join(f"file://{Path(d).resolve()}" for d in extra_dirs)
        overrides.append(f"hydra.searchpath=[{paths}]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_PACKAGE, version_base="1.3"):
            cfg = compose(config_name, overrides=overrides, return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        stage = _unknown_stage(error, overrides, extra_dirs)
        raise stage or translate_error(error, extra_dirs) from None
    except yaml.YAMLError as error:
        raise yaml_error(error) from None
    finally:
        GlobalHydra.instance().clear()
    check_closed(cfg)
    return cfg


def check_config_dirs(extra_dirs: Sequence[str]) -> None:
    """`--config-dir` folders exist (Hydra only warns, then cannot find the recipe)."""
    for folder in extra_dirs:
        if not folder or not Path(folder).expanduser().is_dir():
            raise RecipeError(
                f"`--config-dir {folder}` is not a folder. Point it at the folder that holds "
                "your recipe/ (and stages/, model/, data/) folders.",
                key="--config-dir",
            )


def check_overrides(overrides: Sequence[str], extra_dirs: Sequence[str]) -> None:
    """The mistakes Hydra reports in its own grammar's words: a missing `=`, an empty or
    unknown config group option."""
    for override in overrides:
        key, equals, value = override.partition("=")
        bare = key.lstrip("+~").removeprefix("override ").strip()
        if not equals and not key.startswith("~"):
            raise RecipeError(
                f"`{override}` is not an override: write key=value (e.g. {bare or 'seed'}=3).",
                key=bare or None,
            )
        if not bare:
            raise RecipeError(
                f"`{override}` has no key before `=`: write key=value (e.g. seed=3).", key=None
            )
        if bare in GROUPS and equals:
            _check_group_option(bare, value, extra_dirs)


def _check_group_option(group: str, value: str, extra_dirs: Sequence[str]) -> None:
    options = _options(group, extra_dirs)
    if value in options or ("," in value or "(" in value):  # a sweep is expanded later
        return
    what = f"Unknown {group} `{value}`." if value else f"`{group}=` needs a value."
    raise RecipeError(
        f"{what}{did_you_mean(value, options) if value else ''} "
        f"Available: {', '.join(options)}. Fix: {group}=<one of those>.",
        key=group,
    )


def _options(group: str, extra_dirs: Sequence[str]) -> list[str]:
    """A group's options: the shipped ones and those of every `--config-dir` folder."""
    extra = (option for folder in extra_dirs for option in available(group, Path(folder)))
    return sorted({*available(group), *extra})


def yaml_error(error: yaml.YAMLError) -> RecipeError:
    """A YAML syntax error in a recipe file: the file, the line and what is wrong."""
    mark = getattr(error, "problem_mark", None)
    where = (
        f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a YAML file"
    )
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return RecipeError(
        f"YAML syntax error in {where}: {problem}. Fix the file (check indentation, "
        "brackets and quotes).",
        key=None,
    )


def check_closed(cfg: DictConfig) -> None:
    """Every key is one the schema knows, `+` or not: Hydra lets `+key=value` add any key,
    and a misspelt setting must not be dropped silently."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    schema = OmegaConf.get_type(cfg)  # the root's schema: EngineConfig, or one extending it
    _check_node(plain, schema if dataclasses.is_dataclass(schema) else EngineConfig, "")


def _check_node(node: Any, schema: type, prefix: str) -> None:
    if not isinstance(node, dict):
        return
    hints = typing.get_type_hints(schema)
    for key, value in node.items():
        full = f"{prefix}{key}"
        if key not in hints:
            valid = list(hints)
            hint = did_you_mean(str(key), valid) or _trainer_hint(schema, prefix, str(key))
            raise RecipeError(
                f"Unknown key `{full}`.{hint} Valid keys there: {', '.join(valid)}.", key=full
            )
        inner, mapping = _dataclass_in(hints[key])
        if inner is not None and mapping and isinstance(value, dict):
            for name, item in value.items():  # stage.<name>: each a StageConfig
                _check_node(item, inner, f"{full}.{name}.")
        elif inner is not None:
            _check_node(value, inner, f"{full}.")


def _trainer_hint(schema: type, prefix: str, key: str) -> str:
    """A trainer setting typed one level too high (`stage.llm.learning_rate`)."""
    if schema is not StageConfig:
        return ""
    fields = trainer_fields()
    match = key if key in fields else closest(key, fields)
    return f" Did you mean `{prefix}train.{match}`?" if match else ""


def trainer_fields() -> set[str]:
    """Every field of the trainers' settings classes (a stage's `train` keys are one's)."""
    from recipe_engine.config.library_keys import library_fields
    from recipe_engine.trainers import TRAINERS

    return {name for kind in TRAINERS.values() for name in library_fields(kind.settings_class)}


def _dataclass_in(hint: Any) -> tuple[type | None, bool]:
    """(the dataclass a field holds, whether inside a mapping): `X`, `X | None`, `dict[str, X]`."""
    if dataclasses.is_dataclass(hint):
        return hint, False
    args = typing.get_args(hint)
    mapping = typing.get_origin(hint) is dict
    found = [a for a in args if dataclasses.is_dataclass(a)]
    return (found[0], mapping) if found else (None, False)


def _unknown_stage(
    error: BaseException, overrides: Sequence[str], extra_dirs: Sequence[str]
) -> RecipeError | None:
    """A key naming a stage the recipe does not have (`stage.lmm.train.x`), with its
    did-you-mean; None when the error is something else."""
    named = {
        m.group(1): o
        for o in overrides
        if (m := re.match(r"^[+~]*stage\.([\w\-]+)\.", o)) is not None
    }
    if not named or "stage." not in str(error):
        return None
    rest = [o for o in overrides if o not in named.values()]
    try:
        stages = compose_config(rest, extra_dirs=extra_dirs).stage
    except RecipeError:
        return None
    for name, override in named.items():
        if name not in stages:
            return RecipeError(
                f"`{override.lstrip('+~').split('=')[0]}` names stage `{name}`, which this "
                f"recipe does not have.{did_you_mean(name, stages)} Stages: {', '.join(stages)}.",
                key=f"stage.{name}",
            )
    return None


# Library settings are open mappings validated against SFTConfig / LoraConfig /
# BitsAndBytesConfig, so any of their keys may be set without Hydra's `+` (add-or-override).
# A stage's `data` and every `columns` mapping are open the same way.
_LIBRARY_KEY = re.compile(
    r"^((stage\.[\w\-]+\.(train|lora|quantization|data)\.\w+"
    r"|(stage\.[\w\-]+\.)?data\.columns\.\w+)=)"
)
ADDED = "++"


def as_add_or_override(override: str) -> str:
    """A library or data key as Hydra's add-or-override (`++key=value`)."""
    return _LIBRARY_KEY.sub(ADDED + r"\1", override)


def as_typed(override: str) -> str:
    """An override as the user typed it: without the `++` the engine added."""
    bare = override.removeprefix(ADDED)
    return bare if override.startswith(ADDED) and _LIBRARY_KEY.match(bare) else override


def translate_error(error: BaseException, extra_dirs: Sequence[str] = ()) -> RecipeError:
    """One message naming the key, what was wrong and the fix, from a Hydra/OmegaConf error."""
    raised = _raised_by_resolver(error)
    if raised is not None:
        return raised
    text = str(error)
    cause = error.__cause__ or error
    if isinstance(error, OverrideParseException):
        return _unparsable(error)
    missing = re.search(r"Could not find '([\w\-./]+)/([^']+)'", text)
    if isinstance(error, MissingConfigException) and missing:
        group, name = missing.groups()
        options = _options(group, extra_dirs)
        return RecipeError(
            f"Unknown {group} `{name}`.{did_you_mean(name, options)} "
            f"Available: {', '.join(options)}. Fix: {group}=<one of those>.",
            key=group,
        )
    key = getattr(cause, "full_key", None) or _override_key(text)
    library = re.fullmatch(r"stage\.[\w\-]+\.(train|lora|quantization)\.(\w+)", key or "")
    if "Could not override" in text and library:
        return _library_key_error(key, *library.groups())
    choice = _choice_of(cause, key)
    if choice is not None:
        return _not_a_choice(key, getattr(cause, "value", None), choice)
    if "not in" in str(cause) and key:
        parent_type = getattr(cause, "object_type", None)
        valid = getattr(parent_type, "__dataclass_fields__", {})
        if not valid and "." in key:  # an open mapping (model.components, ...): any key goes
            return RecipeError(
                f"`{key.rsplit('.', 1)[0]}` has no `{key.rsplit('.', 1)[1]}` yet: add it with "
                f"Hydra's append syntax, +{key}=<value> (`{key}=` changes an existing key only).",
                key=key,
            )
        name = key.rsplit(".", 1)[-1]
        hint = did_you_mean(name, valid) or _trainer_hint(parent_type, key[: -len(name)], name)
        listing = f" Valid keys there: {', '.join(valid)}." if valid else ""
        return RecipeError(f"Unknown key `{key}`.{hint}{listing}", key=key)
    if "does not support deletion" in str(cause) and key:
        return RecipeError(
            f"`~{key}` removes a key, but `{key}` is part of the engine's schema and stays: "
            f"set it instead ({key}=null for none, or another value).",
            key=key,
        )
    if "Ambiguous value" in text:
        return RecipeError(
            f"{text.splitlines()[0]} Use the list form, e.g. gpus=[6,7]; in multirun (-m) "
            "a comma means a sweep.",
        )
    detail = str(cause).splitlines()[0]
    where = f"`{key}`: " if key else ""
    # OmegaConf names the type it wanted; a switch's words are worth saying.
    switch = "is not a valid bool" in detail
    fix = "Fix it: use true or false." if switch else "Fix the override or the YAML entry."
    return RecipeError(f"Invalid value for {where}{detail}. {fix}", key=key)


def _choice_of(cause: BaseException, key: str | None) -> type[enum.Enum] | None:
    """The closed choice (`config.choices`) a refused value was given for, if it was one."""
    parent = getattr(cause, "object_type", None)
    if key is None or not dataclasses.is_dataclass(parent):
        return None
    hint = typing.get_type_hints(parent).get(key.rsplit(".", 1)[-1])
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


def _not_a_choice(key: str, value: object, choice: type[enum.Enum]) -> RecipeError:
    """One message from the choice's type: the value, the members, the closest one."""
    members = [member.name for member in choice]
    return RecipeError(
        f"`{key}={value}` is not one of: {', '.join(members)}.{did_you_mean(str(value), members)}",
        key=key,
    )


def _unparsable(error: OverrideParseException) -> RecipeError:
    """An override Hydra cannot parse, quoted as the user typed it."""
    typed = as_typed(error.override)
    fix = (
        "Write one `=` between the key and its value (key=value)"
        if re.match(r"^[+~]*[\w.\-/@]+==", typed)
        else "Check its brackets and quotes: lists are key=[a,b], a value with spaces or "
        "commas is quoted (key='a b')"
    )
    first = str(error).splitlines()[0].replace(error.override, typed)
    return RecipeError(
        f"Could not parse `{typed}`: {first}. {fix}.",
        key=_override_key(f"override {error.override}"),
    )


def _raised_by_resolver(error: BaseException) -> RecipeError | None:
    """The RecipeError a resolver (config.resolvers) raised, which OmegaConf re-wraps."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, RecipeError):
            key = seen.key or getattr(error, "full_key", None)
            return RecipeError(str(seen), key=key)
        seen = seen.__context__
    return None


def _library_key_error(key: str, section: str, name: str) -> RecipeError:
    """A key the stage's template doesn't set: valid library keys are added with `+`."""
    from recipe_engine.config import library_keys as validate

    class_name = {
        "train": "trainer settings (SFTConfig, DPOConfig or ORPOConfig)",
        "lora": "LoraConfig",
        "quantization": "BitsAndBytesConfig",
    }
    engine_keys = {"lora": validate.ENGINE_LORA_KEYS, "quantization": validate.ENGINE_QUANT_KEYS}
    library = {"lora": "LoraConfig", "quantization": "BitsAndBytesConfig"}
    known = trainer_fields() if section == "train" else validate.library_fields(library[section])
    fields = set(known) | engine_keys.get(section, set())
    if name in fields:
        return RecipeError(
            f"`{key}` is a valid {class_name[section]} setting that this stage's template does not "
            f"set; add it with Hydra's append syntax: +{key}=<value>.",
            key=key,
        )
    return RecipeError(
        f"Unknown key `{key}`: not a {class_name[section]} field.{did_you_mean(name, fields)}",
        key=key,
    )


def _override_key(text: str) -> str | None:
    found = re.search(r"override ([\w.\-+~]+)=", text) or re.search(r"override '?([\w.]+)", text)
    return found.group(1).lstrip("+~") if found else None


def to_engine_config(cfg: DictConfig) -> EngineConfig:
    """The composed config as the schema's dataclasses (typed from here on)."""
    try:
        config = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as error:  # e.g. a mandatory key left unset (`???`)
        raise translate_error(error) from None
    assert isinstance(config, EngineConfig), type(config)
    return config


def to_plain(cfg: DictConfig) -> JsonObject:
    """The resolved config as plain data (planners and the DAG take plain data)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]
    except OmegaConfBaseException as error:  # e.g. a resolver that refused
        raise translate_error(error) from None
