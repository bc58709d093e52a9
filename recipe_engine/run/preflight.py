"""Let the libraries judge each stage's settings before anything loads.

Every `SFTConfig`, `LoraConfig` and `BitsAndBytesConfig` a run would build is built at plan
time in a clean child process (`config.library_objects`), so a combination the libraries
refuse (`lr_scheduler_type=reduce_lr_on_plateau` without evaluation, `layers_to_transform`
with a string `target_modules`, a `report_to` integration that is not installed) is
refused here, in the engine's words, instead of after the model has loaded. The verdict,
passing or not, is remembered: it is a fact about the settings, the installed libraries and
the few variables the trackers read, so an unchanged plan pays the child's imports once (a
refused `plan` then `run` included).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.plan.recipe_plan import StagePlan
from recipe_engine.resolve import cache
from recipe_engine.trainers import TRAINERS

# Placement decides these for the machine that runs the stage; the child runs on CPU, so
# they are left to the trainer (a bf16 plan for a GPU profile is valid on a laptop).
DEVICE_KEYS = (
    "use_cpu", "bf16", "fp16", "tf32", "fsdp", "fsdp_config", "deepspeed", "ddp_backend",
    "accelerator_config",
)  # fmt: skip
# A torchrun rank's variables would make the child's SFTConfig join the process group.
LAUNCHER_VARIABLES = re.compile(
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|"
    r"ROLE_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*)$"
)
# What transformers reads besides installed packages to decide whether a `report_to`
# integration is available (integration_utils.is_*_available), part of a verdict's key: the
# switches by value, the others by whether they are set at all (a URL, a secret).
TRACKER_SWITCHES = ("DISABLE_MLFLOW_INTEGRATION", "DISABLE_KUBEFLOW_INTEGRATION")
TRACKER_SETTINGS = ("KUBEFLOW_TRAINER_SERVER_URL", "COMET_API_KEY")
ACCEPTED: JsonObject = {"accepted": True}
SECTIONS = {
    **{kind.settings_class: "train" for kind in TRAINERS.values()},
    "LoraConfig": "lora",
    "BitsAndBytesConfig": "quantization",
}


def check_with_libraries(stages: Sequence[StagePlan]) -> None:
    """RecipeError naming the stage and key when a library refuses a stage's settings."""
    for stage in stages:
        _check_device_settings(stage)
    payload = [library_arguments(s) for s in stages if not s.config.evaluate_only]
    if not payload:
        return
    inputs: JsonObject = {"stages": payload, "tracker variables": tracker_variables()}
    verdict = cache.remembered("libraries", inputs, lambda: _ask_child(payload) or ACCEPTED)
    if verdict != ACCEPTED:
        raise _refusal(Refusal.from_json(verdict), payload)


def tracker_variables() -> JsonObject:
    """The variables of this environment that decide which trackers the child finds."""
    switches = {n: os.environ[n].strip().upper() for n in TRACKER_SWITCHES if n in os.environ}
    return switches | {name: True for name in TRACKER_SETTINGS if name in os.environ}


def _check_device_settings(stage: StagePlan) -> None:
    """The one device setting a user sets directly; the child cannot judge it on its CPU."""
    if stage.trainer.get("tf32") and stage.placement.device != "cuda":
        raise RecipeError(
            f"`stage.{stage.name}.train.tf32` needs an NVIDIA GPU (Ampere or newer), but stage "
            f"`{stage.name}` runs on {stage.placement.device}. Remove it, or run on such a GPU.",
            key=f"stage.{stage.name}.train.tf32",
        )


def library_arguments(stage: StagePlan) -> JsonObject:
    """The arguments the stage's run will pass to each library class, as the child process
    reads them (`library_objects.judge`): one JSON object per stage."""
    trainer = {k: v for k, v in stage.trainer.items() if k not in DEVICE_KEYS}
    policy = stage.policy
    return {
        "stage": stage.name,
        TRAINERS[stage.config.trainer].settings_class: {**trainer, "use_cpu": True},
        "LoraConfig": policy.lora.config if policy.lora else None,
        "BitsAndBytesConfig": policy.quantization.config if policy.quantization else None,
    }


@dataclass(frozen=True)
class Refusal:
    """A library's (or the engine's) refusal of one stage's settings, as the child reports
    it (`library_objects.judge`): the library's own words, or the engine's naming the key."""

    stage: str
    class_name: str  # SFTConfig, LoraConfig, BitsAndBytesConfig, ...
    error: str = ""  # the library's exception text
    key: str | None = None  # with `message`: the refused key, within its section
    message: str | None = None  # the engine's own words, naming the key and the fix

    @classmethod
    def from_json(cls, verdict: JsonObject) -> Refusal:
        return cls(
            verdict["stage"],
            verdict["class"],
            verdict.get("error", ""),
            verdict.get("key"),
            verdict.get("message"),
        )


def _ask_child(payload: list[JsonObject]) -> JsonObject:
    """`library_objects.judge(payload)`, run in a clean child process: its verdict as it
    prints it, `{}` where every stage's settings are accepted. The child `LibraryChild`
    started early is asked if there is one, else a new one."""
    return (_early or LibraryChild()).verdict(payload)


class LibraryChild:
    """The child process that judges the stages' settings (`library_objects`). Its imports
    (TRL, PEFT, transformers: seconds) need no stage, so a plan that reads models and rows
    starts it at its first read (`start`) and the imports overlap the reads; a plan whose
    reads and verdict are all cached never starts it. Used as `with`, it is the one
    `_ask_child` asks, and is stopped on the way out."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[str] | None = None

    def start(self) -> None:
        if self._child is not None:
            return
        env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARIABLES.match(k)}
        self._child = subprocess.Popen(
            [sys.executable, "-m", "recipe_engine.config.library_objects", "--import-first"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "CUDA_VISIBLE_DEVICES": ""},
        )

    def verdict(self, payload: list[JsonObject]) -> JsonObject:
        self.start()
        assert self._child is not None
        child, self._child = self._child, None  # one verdict per child
        try:
            stdout, stderr = child.communicate(json.dumps(payload), timeout=600)
        finally:
            _stop(child)
        if child.returncode != 0:
            last = (stderr.strip().splitlines() or ["no output"])[-1]
            raise RecipeError(
                f"Could not check the stage settings with the installed libraries ({last}). "
                "Reinstall them with `make install`."
            )
        return json.loads(stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        if self._child is not None:
            _stop(self._child)
            self._child = None

    def __enter__(self) -> LibraryChild:
        global _early
        _early = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _early
        _early = None
        self.stop()


def _stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()  # not asked (a cached verdict, a refusal before it): nothing to wait for
    child.wait()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


# The child a plan started early (`LibraryChild` as `with`), for `_ask_child` to ask.
_early: LibraryChild | None = None


def _refusal(refusal: Refusal, payload: list[JsonObject]) -> RecipeError:
    name, class_name = refusal.stage, refusal.class_name
    if refusal.message is not None:  # the engine's own words, naming the key and the fix
        return RecipeError(
            refusal.message, key=f"stage.{name}.{SECTIONS[class_name]}.{refusal.key}"
        )
    detail = refusal.error.strip().splitlines()[0] if refusal.error.strip() else ""
    arguments = next(s for s in payload if s["stage"] == name)[class_name] or {}
    named = [k for k in arguments if re.search(rf"\b{re.escape(k)}\b", detail)]
    section = f"stage.{name}.{SECTIONS[class_name]}"
    key = f"{section}.{named[0]}" if named else section
    return RecipeError(
        f"{class_name} refuses the settings of stage `{name}`: {detail}. "
        f"Fix `{key}` (or the keys it depends on).",
        key=key,
    )
