"""Failures the engine exists to prevent, recognised in a user's own log: what caused each and
the fix. `doctor log=FILE` reads a training log or traceback and names them.

The messages are the libraries' own (accelerate 1.15, torch 2.14), as the seeds met them on a
GPU (FIELD-NOTES.md, ../shared/seeds/) and as their CPU twins raise them
(tests/run/test_seed_failures.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.errors import RecipeError


@dataclass(frozen=True)
class KnownFailure:
    """A library message, what made it, and what to do instead."""

    name: str
    message: re.Pattern[str]
    cause: str
    fix: str


KNOWN_FAILURES = (
    KnownFailure(
        "device_map='auto' under a distributed launcher",
        re.compile(r"can't train a model that has been loaded with `?device_map='auto'`?"),
        "the model was loaded with device_map='auto' (or another map spreading it over several "
        "devices, or onto disk) and then trained by a launcher with more than one process: "
        "accelerate refuses to wrap a model that is split across devices in any distributed "
        "mode",
        "load each rank's whole model onto its own device: device_map={'': LOCAL_RANK} on GPUs, "
        "{'': 'cpu'} on CPU, or let the engine place it (`parallel=ddp`, `parallel=fsdp`); "
        "for one model over several GPUs, run one process (`parallel=model_parallel`)",
    ),
    KnownFailure(
        "parameters on another device than the process's",
        re.compile(
            r"module must have its parameters and buffers on device \S+ \(device_ids\[0\]\) "
            r"but found one of them on device|DistributedDataParallel's input module must be "
            r"on the same type of devices"
        ),
        "some parameters sit on another device than the one the process trains on (left on "
        "the CPU or on disk/meta by a device map, or moved by code after loading), and "
        "DataParallel / DistributedDataParallel refuses to wrap a model split like that "
        "(often after ACCELERATE_BYPASS_DEVICE_MAP=true silenced the device_map='auto' error)",
        "load the whole model onto the rank's device (device_map={'': LOCAL_RANK}, or "
        "{'': 'cpu'} on CPU) and never move parts of it afterwards; the engine's guard checks "
        "every parameter's device before step 0",
    ),
    KnownFailure(
        "nn.DataParallel in a single process",
        re.compile(
            r"does not support nn\.DataParallel|torch/nn/parallel/data_parallel\.py|"
            r"Caught \w+ in replica \d+ on device"
        ),
        "one process saw several GPUs and the Trainer wrapped the model in nn.DataParallel "
        "(FIELD-NOTES.md, section 1)",
        "show each process one GPU (CUDA_VISIBLE_DEVICES, or the engine's `gpus=`), and use "
        "torchrun / `parallel=ddp` for data parallelism",
    ),
)


def diagnose(text: str) -> list[KnownFailure]:
    """The known failures whose message appears in `text`, in table order, once each."""
    return [failure for failure in KNOWN_FAILURES if failure.message.search(text)]


def read_log(path: str) -> str:
    """A user's log as text (bytes that are not UTF-8 replaced), or one message why not."""
    file = Path(path).expanduser()
    try:
        return file.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        raise RecipeError(
            f"`log={path}` cannot be read ({error.strerror or error}). Point it at the log or "
            "traceback of the failed run.",
            key="log",
        ) from None


def diagnosis_lines(text: str) -> list[str]:
    """The report section: each failure found with its cause and fix, or that none was."""
    found = diagnose(text)
    if not found:
        return ["none of the known placement failures appears in this log"]
    lines = []
    for failure in found:
        lines += [f"{failure.name}", f"  cause: {failure.cause}", f"  fix:   {failure.fix}"]
    return lines
