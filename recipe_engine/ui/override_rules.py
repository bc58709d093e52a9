"""What overrides a run started from the browser may carry: none that writes outside
output_root or runs code from outside the folder the server started in.

The overrides are Hydra's, typed as on the command line; Hydra's own parser reads each (its
key, its value as data: a list or a mapping given to a parent key is looked into, key by key).
Refused, each with the reason:

- Hydra's own settings (`hydra.run.dir`, `hydra.sweep.dir`, `hydra.job.chdir`, callbacks,
  `hydra/launcher=...`): they choose where a run writes and what code runs around it;
- `output_root` (the server's own is given to every run) and any setting of a folder a run
  writes (`*_dir`: `stage.X.train.output_dir`, `logging_dir` ...);
- uploads and trackers that write elsewhere (`push_to_hub`, `hub_*`; `report_to` other than
  `none` and `tensorboard`, which writes in the run folder);
- code from a model's files (`trust_remote_code`, `allow_pickle`), a scheduler's shell lines
  and options (`slurm.setup`, `slurm.additional_parameters`), Ray's `runtime_env`, and
  harness task files (`harness.include_path`);
- a reward function (`stage.X.rewards[].fn`) whose file or module is not inside the folder
  the server started in, and a trainer kind or launcher that is not one the engine ships (a
  plug-in is code from elsewhere);
- interpolations (`${...}`: resolved later, they could name any folder or variable), sweeps
  (the view starts one run; `-m` is the terminal's) and command-line flags.

What this does not cover (docs/ui.md says so too): the files a run reads (data, model
folders, probe files) are read as on the command line; the engine's caches (its own, the
Hugging Face cache) are written as by any command; recipes of the shipped set and of the
server's own `--config-dir` are trusted as they are.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from recipe_engine.launchers.registry import launchers
from recipe_engine.trainers import TRAINERS

TRACKERS_IN_OUTPUT_ROOT = ("none", "tensorboard")
_WRITES_FOLDER = re.compile(r"\w*_dir|dir")
_CODE_KEYS = ("trust_remote_code", "allow_pickle")
_STAGE_SETTING = re.compile(r"stage\.[\w-]+\.(?P<section>\w+)(\.(?P<setting>[\w.]+))?")


class Unsafe(Exception):
    """Overrides the view will not start a run with (the reason is shown; nothing runs)."""


@dataclass(frozen=True)
class Rules:
    """The folders the rules hold runs to: where they write, and where their code may be."""

    output_root: Path  # resolved
    start_dir: Path  # the folder the server started in, resolved


def words_of(text: str) -> list[str]:
    """The overrides typed in the view's box, split as a shell splits a command line."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise Unsafe(f"the overrides do not split into words: {error}") from None
    flags = [word for word in words if word.startswith("-")]
    if flags:
        raise Unsafe(
            f"`{flags[0]}` is a command-line flag: the view starts one run with the server's "
            "own config folders; give key=value overrides only"
        )
    return words


def check_overrides(words: list[str], rules: Rules) -> None:
    """Each override as Hydra reads it, refused with the reason when it may write outside
    output_root or run code from outside the server's folder."""
    parser = OverridesParser.create()
    for word in words:
        try:
            (override,) = parser.parse_overrides([word])
        except Exception as error:  # Hydra's grammar errors name the override
            first = str(error).strip().splitlines()[0] if str(error).strip() else word
            raise Unsafe(f"`{word}` is not an override Hydra reads: {first}") from None
        key = override.key_or_group
        if override.is_sweep_override():
            raise Unsafe(
                f"`{word}` is a sweep: the view starts one run (compare recipes and seeds with "
                "the form below; a sweep is `python -m recipe_engine -m ...` in a terminal)"
            )
        value = None if override.is_delete() else override.value()
        for path, leaf in _settings(key, value):
            reason = _refusal(path, leaf, rules)
            if reason:
                raise Unsafe(f"`{word}`: {reason}")


def _settings(key: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(full key, value) of every setting an override makes: a mapping's keys and a list's
    items under the key they are given to."""
    yield key, value
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _settings(f"{key}.{name}", inner)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _settings(f"{key}.{index}", inner)


def _refusal(key: str, value: Any, rules: Rules) -> str | None:
    parts = key.replace("/", ".").split(".")
    if parts[0] == "hydra":
        return (
            "Hydra's own settings choose where a run writes (hydra.run.dir, hydra.sweep.dir) and "
            "what code runs around it (callbacks, launchers); the view's runs are laid out in "
            "output_root as the engine lays them out"
        )
    if key == "output_root":
        return (
            f"every run the view starts writes to the server's output_root ({rules.output_root}); "
            "start the server with output_root=DIR to write elsewhere"
        )
    if isinstance(value, str) and "${" in value:
        return (
            "an interpolation (${...}) is resolved when the run composes its config and could "
            "name any folder or variable; write the value itself"
        )
    leaf = parts[-1]
    if _WRITES_FOLDER.fullmatch(leaf):
        return f"`{leaf}` names a folder the run writes to, outside output_root"
    if leaf == "push_to_hub" or leaf.startswith("hub_"):
        return "it uploads the model to the hub: export it from a terminal (`export push=true`)"
    if leaf == "report_to" and _trackers(value) - set(TRACKERS_IN_OUTPUT_ROOT):
        return (
            "trackers other than tensorboard write outside output_root (W&B's and MLflow's "
            "folders in the server's folder, or a service); run it from a terminal"
        )
    if leaf in _CODE_KEYS and value not in (False, None, "false", "False"):
        return f"`{leaf}` runs code from the model's files; run it from a terminal"
    for launcher in launchers().values():
        for command_key, why in launcher.command_keys:
            if key == command_key or key.startswith(f"{command_key}."):
                return why
    if key == "harness.include_path":
        return "harness task files can run Python functions of their own"
    if key == "launcher" and value is not None and str(value) not in launchers():
        return f"launcher `{value}` is not one the engine ships ({', '.join(launchers())})"
    stage = _STAGE_SETTING.fullmatch(key)
    if stage:
        return _stage_refusal(stage["section"], stage["setting"], value, rules)
    return None


def _trackers(value: Any) -> set[str]:
    if isinstance(value, list):
        return {str(v) for v in value}
    return {str(value)} if value is not None else set()


def _stage_refusal(section: str, setting: str | None, value: Any, rules: Rules) -> str | None:
    """A stage's trainer kind (the shipped ones), and what the capabilities owning the section
    say of code it names (only code from the server's folder runs)."""
    if section == "trainer" and setting is None:
        kinds = ["auto", *TRAINERS]
        if value is not None and str(value) not in kinds:
            return f"trainer `{value}` is not a kind the engine ships ({', '.join(kinds)})"
        return None
    owners = [c for kind in TRAINERS.values() for c in kind.capabilities if section in c.sections]
    for capability in owners:
        reason = capability.code_from_elsewhere(setting or "", value, rules.start_dir)
        if reason:
            return f"{reason}; the view runs only code from the folder the server started in"
    return None


def shown(words: list[str]) -> str:
    """Overrides as one line a shell reads back the same."""
    return shlex.join(words)
