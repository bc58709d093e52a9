"""The runs under output_root and each run's stages, as the pages show them.

A finished run is read from its `summary.json` and its stages' manifests; one still going,
stopped or submitted to a cluster from what it writes while it goes (`ui.live`). A run's stage
graph comes from the config Hydra saved in its folder (`.hydra/config.yaml`), so stages not yet
started are drawn too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject
from recipe_engine.launchers.kinds import JobPhase
from recipe_engine.launchers.records import JOBS_FILE, load_jobs
from recipe_engine.launchers.registry import launcher_kind
from recipe_engine.store.gc import find_runs
from recipe_engine.store.records import SUMMARY_FILE, Manifest, RunSummary, StageRow
from recipe_engine.store.store import COMPLETE, ENGINE_MARKER, KEY_LENGTH
from recipe_engine.trainers import known_capabilities
from recipe_engine.ui import live
from recipe_engine.ui.paths import RUN_AREAS, OutputFolder

# The states a stage is drawn in (a CSS class each).
STATES = ("planned", "cached", "training", "committed", "failed")
TRACEBACK = "traceback.txt"
_SUMMARY_STATES = {"trained": "committed", "evaluated": "committed", "cached": "cached"}


@dataclass
class StageView:
    """One stage of a run: its place in the graph, its state and its store entry."""

    name: str
    parent: str | None
    state: str  # one of STATES
    entry: str | None = None  # its store folder's name (the key), once known
    detail: str = ""  # the summary's status, the progress, or why it failed
    progress: live.Progress | None = None
    row: StageRow | None = None  # the summary's row, once the run finished
    trained_by: str | None = None  # a reused stage: the run that trained it
    settings: JsonObject = field(default_factory=dict)  # the recipe's stage config
    # Other stages it loads besides its start, by role (a distilling stage's), drawn as inputs.
    inputs: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.entry[:KEY_LENGTH] if self.entry else "-"

    def manifest(self, store: Path) -> Manifest | None:
        """Its manifest, once committed (None before, or when it does not read)."""
        if not self.entry or not (store / self.entry / COMPLETE).is_file():
            return None
        try:
            return Manifest.load(store / self.entry)
        except RecipeError:
            return None


@dataclass
class RunView:
    """A run folder: its recipe, when it started, its state and its stages in graph order."""

    path: str  # relative to output_root
    recipe: str
    started: float
    state: str  # finished | running | stopped | failed | submitted
    stages: list[StageView]
    reason: str = ""  # failed or stopped: one line
    score: str = "-"  # the final stage's evaluation

    @property
    def started_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))

    def count(self, *states: str) -> int:
        return sum(1 for stage in self.stages if stage.state in states)


def run_folders(folder: OutputFolder) -> list[Path]:
    """Every run and sweep job folder the engine marked (a cluster run's per-stage job
    folders belong to their run), newest first."""
    found = []
    for area in RUN_AREAS:
        base = folder.root / area
        for marker in base.rglob(ENGINE_MARKER) if base.is_dir() else []:
            run_dir = marker.parent
            if not (run_dir.parent / JOBS_FILE).is_file() and not _linked(run_dir, folder.root):
                found.append(run_dir)
    return sorted(found, key=lambda p: (_started(p), str(p)), reverse=True)


def _linked(path: Path, root: Path) -> bool:
    """Whether a symbolic link lies between the root and `path` (never followed)."""
    return any(p.is_symlink() for p in [path, *path.parents] if p.is_relative_to(root))


def list_runs(folder: OutputFolder) -> list[RunView]:
    trained_by = training_runs(folder)
    return [read_run(folder, run_dir, trained_by) for run_dir in run_folders(folder)]


def training_runs(folder: OutputFolder) -> dict[str, str]:
    """Each store entry's name -> the finished run (relative) that trained it."""
    found: dict[str, str] = {}
    for run in find_runs(folder.root):
        for row in run.stages:
            if row.status.split()[0] in ("trained", "evaluated") and row.output:
                found.setdefault(row.output_path(run.path).name, folder.relative(run.path))
    return found


def read_run(folder: OutputFolder, run_dir: Path, trained_by: dict[str, str]) -> RunView:
    """The run's view from the records it wrote so far."""
    config = _config(run_dir)
    stages = _graph_stages(config)
    recipe = str((config.get("recipe") or {}).get("name") or run_dir.parent.name)
    view = RunView(folder.relative(run_dir), recipe, _started(run_dir), "running", stages)
    if (run_dir / SUMMARY_FILE).is_file():
        _finished(view, run_dir)
    elif (run_dir / JOBS_FILE).is_file():
        _submitted(view, run_dir, folder.root / "store")
    else:
        _going(view, run_dir, folder.root / "store")
    for stage in view.stages:
        by = trained_by.get(stage.entry or "")
        stage.trained_by = by if stage.state == "cached" and by != view.path else None
    return view


def _config(run_dir: Path) -> JsonObject:
    """The config Hydra saved with the run (read as data: nothing is resolved)."""
    path = run_dir / ".hydra" / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except yaml.YAMLError:
        data = {}
    return data if isinstance(data, dict) else {}


def _graph_stages(config: JsonObject) -> list[StageView]:
    stages = []
    for name, settings in (config.get("stage") or {}).items():
        settings = settings if isinstance(settings, dict) else {}
        parent = (settings.get("init") or {}).get("from_stage")
        stages.append(
            StageView(
                str(name), parent, "planned", settings=settings, inputs=_inputs(name, settings)
            )
        )
    return stages


def _inputs(name: str, settings: JsonObject) -> dict[str, str]:
    """The other stages a stage's saved settings name as its inputs, by role (asked of the
    capabilities that read them); a damaged config draws none."""
    try:
        return {
            role: ref.stage
            for capability in known_capabilities()
            for role, ref in capability.inputs(name, settings).items()
        }
    except (AttributeError, TypeError):
        return {}


def _stage(view: RunView, name: str) -> StageView:
    """The stage called `name` (added when the saved config did not list it)."""
    for stage in view.stages:
        if stage.name == name:
            return stage
    view.stages.append(StageView(name, None, "planned"))
    return view.stages[-1]


def _finished(view: RunView, run_dir: Path) -> None:
    try:
        summary = RunSummary.load(run_dir)
    except RecipeError as error:
        view.state, view.reason = "failed", str(error)
        return
    view.state = "finished"
    for row in summary.stages:
        stage = _stage(view, row.stage)
        stage.state = _SUMMARY_STATES.get(row.status.split()[0], "committed")
        stage.entry, stage.detail, stage.row = row.output_path(run_dir).name, row.status, row
    scored = [row.eval for row in summary.stages if row.eval != "-"]
    view.score = scored[-1] if scored else "-"


def _submitted(view: RunView, run_dir: Path, store: Path) -> None:
    """A cluster run: each stage job's key is recorded; the shared store says how far it is,
    and the states its launcher recorded in the run folder say which failed and why (a
    scheduler's own states are `runs jobs`'s: asking the scheduler is not reading records)."""
    view.state = "submitted"
    jobs = load_jobs(run_dir)
    recorded = launcher_kind(jobs[0].launcher).recorded_states(run_dir, jobs) if jobs else {}
    for job in jobs:
        stage = _stage(view, job.stage)
        stage.entry = job.key[:KEY_LENGTH]
        if (store / stage.entry / COMPLETE).is_file():
            stage.state = "committed"
        elif (store / f"{stage.entry}.partial").is_dir():
            _training(stage, store / f"{stage.entry}.partial")
        state = recorded.get(job.job_id)
        if stage.state != "committed" and state is not None and state.phase.ended:
            not_run = state.phase is JobPhase.CANCELLED and state.reason.startswith("its parent")
            stage.state = "planned" if not_run else "failed"
            stage.detail = f"{'not run' if not_run else state.said}: {state.reason}"
        stage.detail = stage.detail or job.label
    failed = [stage for stage in view.stages if stage.state == "failed"]
    if failed:
        view.state, view.reason = "failed", f"stage {failed[0].name}: {failed[0].detail}"
    elif view.stages and all(stage.state == "committed" for stage in view.stages):
        view.state = "finished"  # every job committed its stage


def _going(view: RunView, run_dir: Path, store: Path) -> None:
    """A local run without a summary: running, failed (its traceback) or stopped."""
    log = live.read_log(run_dir)
    for name, events in log.stages.items():
        stage = _stage(view, name)
        stage.entry = events.entry
        if events.ended:
            stage.state = events.ended
        elif events.started is not None:
            since = events.since if events.since is not None else view.started
            stage.entry = stage.entry or live.partial_made_between(store, since, events.started)
            _training(stage, store / f"{stage.entry}.partial")
    writes = [
        log.last_write,
        *(live.newest_write(store / f"{s.entry}.partial") for s in view.stages),
    ]
    traceback = run_dir / TRACEBACK
    if traceback.is_file():
        view.state, view.reason = "failed", _last_line(traceback)
    elif live.is_quiet(max(writes)):
        view.state, view.reason = "stopped", "stopped before it finished (no summary.json)"
    if view.state != "running":
        for stage in view.stages:
            if stage.state == "training":
                at = f" (at step {stage.progress.step})" if stage.progress else ""
                stage.state, stage.detail = "failed", view.reason + at


def _training(stage: StageView, partial: Path) -> None:
    stage.state = "training"
    stage.progress = live.progress(partial, stage.settings.get("train") or {})
    stage.detail = stage.progress.text() if stage.progress else "starting"


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    return next((line for line in reversed(lines) if line), "failed")[:300]


def _started(run_dir: Path) -> float:
    """When the run started: its folder's name (Hydra's timestamp), else its saved config."""
    for name in (run_dir.name, run_dir.parent.name):
        try:
            return time.mktime(time.strptime(name, "%Y-%m-%d_%H-%M-%S"))
        except ValueError:
            continue
    config = run_dir / ".hydra" / "config.yaml"
    return (config if config.is_file() else run_dir).stat().st_mtime


def in_order(stages: Iterable[StageView]) -> list[StageView]:
    """Parents (and the other stages a stage loads) before the stages that load them,
    otherwise as the recipe lists them."""
    stages = list(stages)
    names = {stage.name for stage in stages}
    placed: list[StageView] = []

    def loaded(name: str | None) -> bool:
        return name not in names or any(p.name == name for p in placed)

    while len(placed) < len(stages):
        ready = [
            s
            for s in stages
            if s not in placed and loaded(s.parent) and all(map(loaded, s.inputs.values()))
        ]
        placed += ready or [s for s in stages if s not in placed]
    return placed
