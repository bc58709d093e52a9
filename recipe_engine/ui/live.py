"""What a run that has not finished is doing, from what it already writes.

A local run writes its log (`app.log`: "stage X: loading ...", "cached at <entry>",
"committed <entry>", "resuming from <checkpoint>") and, while a stage trains, the store's
`<key>.partial/` folder with `metrics.jsonl` (a line per logged step) and the trainer's
checkpoints (`trainer_state.json`, with the step count it plans). A run submitted to a cluster
(`launcher=slurm`) records each stage's key in `jobs.json`, and its jobs write the same store
entries in the shared folder. Nothing here writes, locks or starts anything.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from recipe_engine.files import JsonObject
from recipe_engine.report.plots import read_metrics
from recipe_engine.store.store import ENGINE_MARKER, KEY_LENGTH

# A run that wrote nothing (log, metrics) for this long, without a summary, has stopped.
QUIET_S = 300
_EVENT = re.compile(
    r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]\[recipe_engine\]\[\w+\] - "
    r"stage (?P<stage>[\w.-]+): (?P<event>loading|cached at|committed|resuming from) ?(?P<rest>.*)$"
)


@dataclass(frozen=True)
class Progress:
    """A training stage's position: step of total, its last loss and the time left."""

    step: int
    total: int | None
    loss: float | None
    seconds_left: float | None

    def text(self) -> str:
        """ "step 120 / 720, loss 0.412, 9 min left"."""
        parts = [f"step {self.step}" + (f" / {self.total}" if self.total else "")]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3f}")
        if self.seconds_left is not None:
            parts.append(f"{duration_text(self.seconds_left)} left")
        return ", ".join(parts)


@dataclass
class StageEvents:
    """What the log says of one stage: started, its store entry once known, how it ended."""

    started: float | None = None  # its "loading" line
    since: float | None = None  # the run's event before it (None: it is the first)
    entry: str | None = None  # the store entry's folder name
    ended: str | None = None  # "cached" | "committed"


@dataclass
class RunLog:
    """The stage events of a run's log, and when it last wrote."""

    stages: dict[str, StageEvents] = field(default_factory=dict)
    last_write: float = 0.0


def read_log(run_dir: Path) -> RunLog:
    """The stage events of the run's log (Hydra's `<job>.log` in the run folder)."""
    found, previous = RunLog(), None
    for log in sorted(run_dir.glob("*.log")):
        found.last_write = max(found.last_write, log.stat().st_mtime)
        for line in log.read_text(errors="replace").splitlines():
            match = _EVENT.match(line)
            if match:
                events = found.stages.setdefault(match["stage"], StageEvents())
                _apply(events, match, previous)
                previous = _clock(match["time"])
    return found


def _clock(text: str) -> float:
    """A log line's local time as a timestamp."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def _apply(events: StageEvents, match: re.Match[str], previous: float | None) -> None:
    event, rest = match["event"], match["rest"].strip()
    if event == "loading":
        events.started, events.since = _clock(match["time"]), previous
        events.ended = None
    elif event == "resuming from":  # <store>/<key>.partial/checkpoints/checkpoint-N
        events.entry = _entry_name(Path(rest).parent.parent)
    else:
        events.entry = _entry_name(Path(rest))
        events.ended = "cached" if event == "cached at" else "committed"


def _entry_name(path: Path) -> str:
    return path.name.removesuffix(".partial")


def partial_made_between(store: Path, since: float, started: float) -> str | None:
    """The entry name of the partial store folder a stage made before its "loading" line and
    after the run's event before it (a second's slack each side for the log's clock): a local
    run's log names the key of a training stage only once it commits or resumes."""
    made = []
    for folder in store.glob("*.partial") if store.is_dir() else []:
        marker = folder / ENGINE_MARKER
        stamp = marker.stat().st_mtime if marker.is_file() else None
        if stamp is not None and since - 1 <= stamp <= started + 1:
            made.append((stamp, folder.name.removesuffix(".partial")))
    return max(made)[1] if made else None


def progress(entry: Path, settings: JsonObject) -> Progress | None:
    """A training stage's progress from its store folder (`<key>.partial`), or None before its
    first logged step; `settings` are the stage's trainer settings (the total's fallback)."""
    records = [r for r in read_metrics(entry / "metrics.jsonl") if "loss" in r]
    if not records:
        return None
    last = records[-1]
    total = _planned_steps(entry) or _total_from_settings(last, settings)
    left = None
    if total and len(records) > 1:
        per_step = (last["time"] - records[0]["time"]) / max(1, last["step"] - records[0]["step"])
        left = max(0.0, per_step * (total - last["step"]))
    return Progress(int(last["step"]), total, float(last["loss"]), left)


def _planned_steps(entry: Path) -> int | None:
    """The step count the trainer plans, as its newest checkpoint records it."""
    states = sorted(entry.glob("checkpoints/checkpoint-*/trainer_state.json"), key=_step_of)
    for state in reversed(states):
        try:
            steps = json.loads(state.read_text()).get("max_steps")
        except (OSError, ValueError):
            continue  # a checkpoint being written
        if isinstance(steps, int) and steps > 0:
            return steps
    return None


def _step_of(path: Path) -> int:
    return int(path.parent.name.rsplit("-", 1)[-1])


def _total_from_settings(last: JsonObject, settings: JsonObject) -> int | None:
    """Before the first checkpoint: `max_steps`, else the steps an epoch takes (step / epoch
    so far) times the epochs asked for."""
    max_steps = settings.get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0:
        return max_steps
    epoch, epochs = last.get("epoch"), settings.get("num_train_epochs", 3)
    if not epoch or not isinstance(epochs, int | float):
        return None
    return round(last["step"] / epoch * epochs)


def is_quiet(last_write: float, now: float | None = None) -> bool:
    """Nothing written for QUIET_S seconds: the run is no longer alive."""
    return (now or time.time()) - last_write > QUIET_S


def newest_write(entry: Path) -> float:
    metrics = entry / "metrics.jsonl"
    return metrics.stat().st_mtime if metrics.is_file() else 0.0


def duration_text(seconds: float) -> str:
    """ "45 s", "9 min", "2.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def short_key(entry: str) -> str:
    return entry[:KEY_LENGTH]
