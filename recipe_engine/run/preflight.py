"""Let the libraries judge each stage's settings before anything loads.

Every `SFTConfig`, `LoraConfig` and `BitsAndBytesConfig` a run would build is built at plan
time in a clean child process (`config.library_objects.judge`, in a child that this process's
judge forks: `config.library_judge`, which imports the libraries once), so a combination the
libraries refuse (`lr_scheduler_type=reduce_lr_on_plateau` without evaluation,
`layers_to_transform` with a string `target_modules`, a `report_to` integration that is not
installed) is refused here, in the engine's words, instead of after the model has loaded.
The verdict, passing or not, is remembered: it is a fact about the settings, the installed
libraries and the few variables the trackers read, so an unchanged plan is judged once (a
refused `plan` then `run` included).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from recipe_engine.config.library_judge import (
    FORK_IS_SAFE,
    IDLE_ARGUMENT,
    ONE_VERDICT_ARGUMENT,
)
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
# A judge unasked this long ends (its memory is the training stack's, idle through a run);
# the next plan starts another. A plan's verdict takes well under this; one that does not is
# reported, never waited on forever.
JUDGE_IDLE_SECONDS = 60.0
VERDICT_TIMEOUT_SECONDS = 600.0
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


def tracker_variables() -> dict[str, str | bool]:
    """The variables of this environment that decide which trackers the child finds: the
    switches by value, the settings by whether they are set."""
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
    reports it, `{}` where every stage's settings are accepted."""
    for _ in range(2):  # a judge that went idle as it was asked: once more, with a new one
        answer = start_judge().ask(payload)
        if answer is not None:
            return answer
    raise _could_not_check("the libraries' judge ended twice without a verdict")


@contextmanager
def judge_at_first_read() -> Iterator[None]:
    """A plan's block: its first read starts the judge (`cache.before_first_read`), so the
    judge's imports overlap the reads, and a plan whose reads are all cached starts none. On
    the way out a judge never asked is stopped (a plan whose verdict was cached after all:
    its imports, maybe still under way, are no one's), and one asked is kept for the next."""
    with cache.before_first_read(start_judge):
        try:
            yield
        finally:
            if _judge is not None and not _judge.asked:
                _judge.stop()


def stop_judge() -> None:
    """This process's judge stopped: its plans are made and training comes next, which needs
    the memory the judge holds (the imported stack) more than a later plan needs its imports."""
    global _judge
    if _judge is not None:
        _judge.stop()
        _judge = None


def start_judge() -> LibraryJudge:
    """This process's judge, started now if it has none that fits."""
    global _judge
    if _judge is None or not _judge.fits():
        if _judge is not None:
            _judge.stop()
        _judge = LibraryJudge()
    return _judge


class LibraryJudge:
    """The judge process (`config.library_judge`): it imports the libraries (seconds) once,
    then forks one clean child per verdict, so an engine process that judges many plans (the
    verbs that plan several, the suite's in-process plans) pays the imports once. Its own
    variables are this process's as a clean child would have them (no torchrun rank
    variables, no GPU); each verdict's child takes the variables of its moment. It is
    replaced when what a verdict's key holds changes (transformers reads Comet's key as it
    is imported; a library installed since would not be seen), and ends on its own after
    `JUDGE_IDLE_SECONDS` without a verdict, or with this process. Where forking is unsafe
    (`forks` false: macOS) it judges one verdict itself and ends, the next one a new judge."""

    def __init__(
        self, idle_seconds: float = JUDGE_IDLE_SECONDS, forks: bool = FORK_IS_SAFE
    ) -> None:
        self.owner = os.getpid()
        self.judging = _what_a_judge_depends_on()
        self.errors = tempfile.TemporaryFile()  # read only to name why a verdict failed
        self.process = subprocess.Popen(
            [sys.executable, "-m", "recipe_engine.config.library_judge"]
            + [IDLE_ARGUMENT, str(idle_seconds)]
            + ([] if forks else [ONE_VERDICT_ARGUMENT]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=clean_env(),
        )
        self.lock = threading.Lock()
        self.asked = False
        atexit.register(self.stop)

    def fits(self) -> bool:
        """Whether it can judge for this process now (not one a fork inherited)."""
        alive = self.process.poll() is None
        return alive and self.owner == os.getpid() and self.judging == _what_a_judge_depends_on()

    def ask(self, payload: list[JsonObject]) -> JsonObject | None:
        """The verdict; None when the judge had ended idle before it read the request."""
        assert self.process.stdin is not None and self.process.stdout is not None
        request = json.dumps({"stages": payload, "env": clean_env()})
        self.asked = True
        with self.lock:
            try:
                self.process.stdin.write(request + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass  # it has ended: its exit code says how
            ready = select.select([self.process.stdout], [], [], VERDICT_TIMEOUT_SECONDS)[0]
            line = self.process.stdout.readline() if ready else ""
        if not line:
            if not ready:
                self.process.kill()
            code = self.process.wait()
            late = f"no verdict in {VERDICT_TIMEOUT_SECONDS:.0f} s"
            reason = self._why_ended(code) if ready else late
            self.stop()
            if code == 0:  # it went idle as the request was sent
                return None
            raise _could_not_check(f"the judge: {reason}")
        answer = json.loads(line)
        if "verdict" not in answer:  # its child crashed; the judge goes on
            raise _could_not_check(self._why_ended(answer["exit"]))
        return answer["verdict"]

    def stop(self) -> None:
        if self.owner != os.getpid():
            return  # a fork's copy: the judge is its parent's
        if self.process.poll() is None:
            self.process.kill()  # no verdict is pending: nothing to wait for
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.errors):
            if stream is not None:
                with suppress(BrokenPipeError):  # a request it never read
                    stream.close()
        atexit.unregister(self.stop)

    def _why_ended(self, code: int) -> str:
        """The signal that ended the judge or its child, or else the last line either wrote
        to stderr (a traceback's error)."""
        if code < 0:
            return f"ended by signal {-code}"
        self.errors.seek(max(0, self.errors.seek(0, os.SEEK_END) - 4096))
        lines = self.errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit code {code}, no output"


def _what_a_judge_depends_on() -> JsonObject:
    """What a verdict's key holds besides the settings (`check_with_libraries`): a judge
    started under other values (a tracker installed since, a variable set) is not asked."""
    return {"tracker variables": tracker_variables(), "versions": cache.versions("libraries")}


def clean_env() -> dict[str, str]:
    """This process's variables as the judge's children take them: no torchrun rank's (the
    child's SFTConfig would join the process group), and no GPU (the child runs on CPU)."""
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARIABLES.match(k)}
    return {**env, "CUDA_VISIBLE_DEVICES": ""}


def _could_not_check(reason: str) -> RecipeError:
    return RecipeError(
        f"Could not check the stage settings with the installed libraries ({reason}). "
        "Reinstall them with `make install`."
    )


# This process's judge (`start_judge`), kept between plans.
_judge: LibraryJudge | None = None


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
