"""Starting the engine's commands from the browser: what the form asks (`LaunchRequest`), the
command it becomes (the same line a terminal would take, output_root the server's), what
`plan` says of it first, and a stage's rerun as a request filled in from its run.

The view never plans or runs anything itself (it imports no torch): `plan` is the engine's own
command in a process of its own, its output shown as it prints it, a refusal with its message;
a run, the same command without `plan`, started by `ui.jobs`.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from recipe_engine.config.compose import as_typed, available, compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.ui.jobs import Command
from recipe_engine.ui.override_rules import Rules, Unsafe, check_overrides, shown, words_of

PLAN_TIMEOUT_S = 600
GROUPS = ("model", "data", "hardware")
_SEEDS = re.compile(r"\s*-?\d+(\s*,\s*-?\d+)*\s*")
_STAGE_KEY = re.compile(r"^[+~]*stage\.(?P<stage>[\w-]+)\.")


@dataclass(frozen=True)
class Choices:
    """What the form offers: the shipped recipes and entries, and those of the server's config
    folders (`--config-dir`)."""

    recipes: list[str]
    model: list[str]
    data: list[str]
    hardware: list[str]

    def of(self, group: str) -> list[str]:
        return list(getattr(self, group))


def choices(config_dirs: Sequence[str]) -> Choices:
    def options(group: str) -> list[str]:
        names = set(available(group))
        for folder in config_dirs:
            names |= set(available(group, Path(folder)))
        return sorted(names)

    return Choices(options("recipe"), options("model"), options("data"), options("hardware"))


@dataclass(frozen=True)
class LaunchRequest:
    """What a start form asks: one recipe (`run`), or recipes compared over seeds (`compare`);
    an entry of each group ("" keeps the recipe's), and overrides as typed."""

    verb: str = "run"  # run | compare
    recipe: str = ""
    recipes: tuple[str, ...] = ()
    seeds: str = ""  # "0,1,2"
    model: str = ""
    data: str = ""
    hardware: str = ""
    overrides: str = ""

    @classmethod
    def from_form(cls, form: Mapping[str, Any], recipes: Sequence[str] = ()) -> LaunchRequest:
        """From a form's fields (`recipes`: the ticked recipes of a compare form)."""

        def text(name: str) -> str:
            value = form.get(name)
            return value.strip() if isinstance(value, str) else ""

        verb = "compare" if text("verb") == "compare" else "run"
        return cls(
            verb,
            text("recipe"),
            tuple(recipes),
            text("seeds"),
            text("model"),
            text("data"),
            text("hardware"),
            text("overrides"),
        )

    def fields(self) -> list[tuple[str, str]]:
        """The request as form fields (the Start form carries what was planned)."""
        pairs = [("verb", self.verb), ("recipe", self.recipe), ("seeds", self.seeds)]
        pairs += [(group, getattr(self, group)) for group in GROUPS]
        pairs += [("recipes", recipe) for recipe in self.recipes]
        return [*pairs, ("overrides", self.overrides)]


@dataclass(frozen=True)
class PlanOutput:
    """What `plan` printed for one recipe, and its exit code."""

    title: str
    command: str
    returncode: int
    text: str

    @property
    def refused(self) -> bool:
        return self.returncode != 0


@dataclass(frozen=True)
class Preview:
    """A request checked and planned: the command it would start and `plan`'s outputs."""

    request: LaunchRequest
    command: Command
    plans: list[PlanOutput] = field(default_factory=list)

    @property
    def startable(self) -> bool:
        return bool(self.plans) and not any(plan.refused for plan in self.plans)


class Launcher:
    """Requests into commands for one server: its output_root, the folder it started in (the
    commands' working folder) and its config folders."""

    def __init__(self, root: Path, start_dir: Path, config_dirs: Sequence[str], python: str):
        self.rules = Rules(root.resolve(), start_dir.resolve())
        self.config_dirs = [str(Path(d).expanduser().resolve()) for d in config_dirs]
        self.python = python

    def choices(self) -> Choices:
        return choices(self.config_dirs)

    def command(self, request: LaunchRequest) -> Command:
        """The engine command a request is, refused (`Unsafe`) with the reason: a recipe or
        entry the server does not offer, seeds that are not numbers, an override the rules
        refuse."""
        offered = self.choices()
        words = words_of(request.overrides)
        check_overrides(words, self.rules)
        picked = [f"{g}={getattr(request, g)}" for g in GROUPS if getattr(request, g)]
        for group in GROUPS:
            value = getattr(request, group)
            if value and value not in offered.of(group):
                raise Unsafe(f"{group} `{value}` is not one of this server's {group} entries")
        tail = [*picked, *words, f"output_root={self.rules.output_root}", *self._flags()]
        if request.verb == "run":
            if request.recipe not in offered.recipes:
                raise Unsafe(f"recipe `{request.recipe}`: choose one of the listed recipes")
            return Command((f"recipe={request.recipe}", *tail), str(self.rules.start_dir))
        unknown = [r for r in request.recipes if r not in offered.recipes]
        if len(request.recipes) < 2 or unknown:
            raise Unsafe("tick two or more of the listed recipes to compare")
        seeds = []
        if request.seeds:
            if not _SEEDS.fullmatch(request.seeds):
                raise Unsafe(f"seeds `{request.seeds}`: write whole numbers, e.g. 0,1,2")
            seeds = [f"seeds=[{','.join(s.strip() for s in request.seeds.split(','))}]"]
        recipes = f"recipes=[{','.join(request.recipes)}]"
        return Command(("compare", recipes, *seeds, *tail), str(self.rules.start_dir))

    def _flags(self) -> list[str]:
        return [flag for folder in self.config_dirs for flag in ("--config-dir", folder)]

    def preview(self, request: LaunchRequest) -> Preview:
        """The command, and what `plan` says of it (each recipe of a comparison, with the
        first seed, the overrides for stages it has)."""
        command = self.command(request)
        if request.verb == "run":
            targets = [(request.recipe, list(command.args))]
        else:
            targets = [(recipe, self._plan_args(recipe, request)) for recipe in request.recipes]
        plans = [self._plan(title, args, command.cwd) for title, args in targets]
        return Preview(request, command, plans)

    def _plan_args(self, recipe: str, request: LaunchRequest) -> list[str]:
        """`compare`'s settings as one recipe's plan: its stage overrides only for stages it
        has (as compare applies them), the first seed."""
        single = replace(request, verb="run", recipe=recipe)
        args = list(self.command(single).args)
        stages = self._stages(recipe)
        args = [
            a
            for a in args
            if not (_STAGE_KEY.match(a) and _STAGE_KEY.match(a)["stage"] not in stages)
        ]
        seed = request.seeds.split(",")[0].strip() if request.seeds else ""
        return [*args, f"seed={seed}"] if seed else args

    def _stages(self, recipe: str) -> set[str]:
        try:
            composed = compose_config([f"recipe={recipe}"], extra_dirs=self.config_dirs)
        except RecipeError:
            return set()
        return set(composed.get("stage") or {})

    def _plan(self, title: str, args: list[str], cwd: str) -> PlanOutput:
        command = Command(("plan", *args), cwd)
        try:
            done = subprocess.run(
                [self.python, "-m", "recipe_engine", *command.args],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=PLAN_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return PlanOutput(title, command.shown(), 124, f"plan took over {PLAN_TIMEOUT_S} s")
        text = done.stdout if done.returncode == 0 else (done.stderr.strip() or done.stdout)
        return PlanOutput(title, command.shown(), done.returncode, text)


def _stage_of(override: str) -> str | None:
    """The stage an override sets (`stage.NAME.`...), None for any other."""
    match = _STAGE_KEY.match(override)
    return match["stage"] if match else None


def rerun_request(run_dir: Path, stage: str) -> LaunchRequest:
    """A stage of a run trained again, from the run's own command line (Hydra saved it with
    the run): its recipe and entries, its overrides, `only=[stage] force=[stage]` (the stage
    retrained, its parents taken from the store). output_root is the server's."""
    saved = run_dir / ".hydra" / "overrides.yaml"
    try:
        words = yaml.safe_load(saved.read_text()) if saved.is_file() else []
    except yaml.YAMLError:
        words = []
    words = [as_typed(str(w)) for w in words or []]
    picked: dict[str, str] = {}
    kept = []
    for word in words:
        key, _, value = word.partition("=")
        if key in ("recipe", *GROUPS):
            picked[key] = value
        elif key not in ("output_root", "only", "force"):
            kept.append(word)
    kept += [f"only=[{stage}]", f"force=[{stage}]"]
    recipe = picked.get("recipe") or run_dir.parent.name
    return LaunchRequest(
        "run",
        recipe,
        model=picked.get("model", ""),
        data=picked.get("data", ""),
        hardware=picked.get("hardware", ""),
        overrides=shown(kept),
    )
