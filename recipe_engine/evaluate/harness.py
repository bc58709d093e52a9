"""Standard evaluation through EleutherAI's lm-evaluation-harness (`compare tasks=[...]`): the
base and every stage of a finished run, each loaded as `evaluate.probing` loads it (adapters on
their full-precision base, one model in memory at a time), scored on the named harness tasks by
`lm_eval.simple_evaluate`, greedy and with a fixed per-task limit. `report.compare` renders the
scores beside the probes' exact match.

The tasks recipe-engine ships (harness_tasks/, offline, small) are read here and handed to the
harness as inline configs with their data paths made absolute; any other name is one the
installed harness knows (its own tasks, or a YAML of `harness.include_path=DIR`). Every score
row carries the harness version and a hash of the task's resolved config (`task_hash`).
"""

from __future__ import annotations

import csv
import gc
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.evaluate.probing import model_loaders
from recipe_engine.files import atomic_write_text
from recipe_engine.store.scores import (
    HarnessResult,
    HarnessScored,
    HarnessSettings,
    TaskScore,
)

log = logging.getLogger("recipe_engine")

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "harness_tasks"
INSTALL = "pip install 'recipe-engine[eval]'"
# A vision-language model answers the text tasks through its language model, with no image.
TEXT_ONLY = "text only (a VLM's language model, no image)"
# What `lm_eval.simple_evaluate` returns (results, configs, n-samples by task): the harness' edge,
# read only by `_scores`.
HarnessResults = dict[str, Any]


def score_harness(run_dir: Path, settings: HarnessSettings, stem: str) -> HarnessScored:
    """The base and every stage on the harness tasks (`evaluate_run`), written as
    `<stem>_harness.json` and `<stem>_harness.csv` in the run folder."""
    return write_harness(run_dir, evaluate_run(run_dir, settings), stem)


def write_harness(run_dir: Path, result: HarnessResult, stem: str) -> HarnessScored:
    """The harness' results as `<stem>_harness.json` and `<stem>_harness.csv`."""
    paths = {
        "csv": Path(run_dir) / f"{stem}_harness.csv",
        "json": Path(run_dir) / f"{stem}_harness.json",
    }
    atomic_write_text(paths["json"], json.dumps(result.to_json(), indent=2) + "\n")
    with paths["csv"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_COLUMNS, "lm_eval_version"])
        for score in result.scores:
            writer.writerow([*(getattr(score, c) for c in CSV_COLUMNS), result.version])
    return HarnessScored(result, **paths)


CSV_COLUMNS = ("model", "task", "metric", "value", "n", "task_hash", "note")


# --------------------------------------------------------------------------- the task names


def shipped_tasks() -> dict[str, Path]:
    """The tasks recipe-engine ships: task name -> its YAML file."""
    import yaml

    found = {}
    for path in sorted(SHIPPED_DIR.glob("*.yaml")):
        found[str(yaml.safe_load(path.read_text(encoding="utf-8"))["task"])] = path
    return found


def check_tasks(settings: HarnessSettings) -> None:
    """Refuse, before any model loads, a harness that is not installed, an include path that is
    not a folder and a task name nobody knows (with the shipped names and a did-you-mean)."""
    _lm_eval()
    if not settings.tasks:
        raise RecipeError("`tasks=` is empty: e.g. tasks=[recipe_arith,recipe_arith_mc].", "tasks")
    path = settings.include_path
    if path is not None and not path.is_dir():
        raise RecipeError(
            f"harness.include_path={path} is not a folder of task YAML files.",
            key="harness.include_path",
        )
    shipped = shipped_tasks()
    known = set(_task_manager(settings).all_tasks) | set(shipped)
    for name in settings.tasks:
        if name not in known:
            raise RecipeError(
                f"Unknown harness task `{name}` in tasks=.{did_you_mean(name, known)} Shipped "
                f"tasks: {', '.join(shipped)}; any task the installed lm_eval knows, or one "
                "of your own with harness.include_path=DIR.",
                key="tasks",
            )


def _lm_eval() -> Any:
    try:
        import lm_eval
    except ImportError:
        raise RecipeError(
            "tasks= runs EleutherAI's lm-evaluation-harness, which is not installed: "
            f"{INSTALL} (`make install` does).",
            key="tasks",
        ) from None
    return lm_eval


def _task_manager(settings: HarnessSettings) -> Any:
    """The harness' task index: the user's folder, and the harness' own tasks only when a name
    is neither shipped nor there (indexing them all takes seconds)."""
    from lm_eval.tasks import TaskManager

    others = set(settings.tasks) - set(shipped_tasks())
    path = str(settings.include_path) if settings.include_path else None
    if path is not None:
        own = TaskManager(include_path=path, include_defaults=False)
        if others <= set(own.all_tasks):
            return own
    return TaskManager(include_path=path, include_defaults=bool(others))


def _task_specs(settings: HarnessSettings) -> list[Any]:
    """What simple_evaluate is given: a shipped task as its config with absolute data paths,
    any other as its name."""
    import yaml

    shipped = shipped_tasks()
    specs: list[Any] = []
    for name in settings.tasks:
        if name not in shipped:
            specs.append(name)
            continue
        config = yaml.safe_load(shipped[name].read_text(encoding="utf-8"))
        files = config["dataset_kwargs"]["data_files"]
        config["dataset_kwargs"]["data_files"] = {
            split: str(shipped[name].parent / path) for split, path in files.items()
        }
        specs.append(config)
    return specs


# --------------------------------------------------------------------------- measuring


def evaluate_run(run_dir: Path, settings: HarnessSettings) -> HarnessResult:
    """The base and every stage of a finished run on the harness tasks, one model at a time."""
    kind, loaders = model_loaders(Path(run_dir))
    with harness_pass(settings, kind) as visit:
        for name, load, _ in loaders:
            model, processor = load()
            visit(name, model, processor)
            del model, processor
            gc.collect()
    return visit.result()


class HarnessPass:
    """The harness tasks asked of each model it is shown, while another measurement holds the
    model loaded (compare's probes), so a comparison loads every model once."""

    def __init__(self, settings: HarnessSettings, kind: str) -> None:
        self.settings, self.kind = settings, kind
        self.manager = _task_manager(settings)
        self.scores: list[TaskScore] = []
        self.templates: dict[str, bool] = {}

    def __call__(self, name: str, model: Any, processor: Any) -> None:
        settings = self.settings
        log.info("compare: %s on harness task(s) %s", name, ", ".join(settings.tasks))
        tokenizer = getattr(processor, "tokenizer", processor)
        self.templates[name] = bool(getattr(tokenizer, "chat_template", None))
        try:
            results = _evaluate(model, tokenizer, settings, self.manager, self.templates[name])
        except Exception as error:  # the harness and the user's tasks raise many types
            if self.kind != "vlm":
                raise _failed(name, error) from error
            self.scores += _skipped(name, settings, error)
        else:
            self.scores += _scores(name, results, TEXT_ONLY if self.kind == "vlm" else "")

    def result(self) -> HarnessResult:
        return HarnessResult(_version(), self.settings, tuple(self.scores), self.templates)


@contextmanager
def harness_pass(settings: HarnessSettings, kind: str) -> Iterator[HarnessPass]:
    """A `HarnessPass` inside the harness' quiet (and, for shipped tasks, offline) session."""
    _lm_eval()
    with _harness_session(settings):
        yield HarnessPass(settings, kind)


def _evaluate(
    model: Any, tokenizer: Any, settings: HarnessSettings, manager: Any, chat: bool
) -> HarnessResults:
    """One model through simple_evaluate: greedy, fixed limit, no bootstrap, the tokenizer's
    chat template applied where it has one (as the engine's own generation does)."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    model.eval()
    lm = HFLM(
        pretrained=model,
        tokenizer=tokenizer,
        backend="causal",
        device=str(model.device),
        batch_size=settings.batch_size,
    )
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=_task_specs(settings),
        task_manager=manager,
        limit=settings.limit,
        log_samples=False,
        bootstrap_iters=0,
        apply_chat_template=chat,
    )


def _scores(model: str, results: Mapping[str, Any], note: str = "") -> list[TaskScore]:
    """Each task's metrics (not their stderr) as score rows, with the task's config hash."""
    hashes = {task: task_hash(config) for task, config in results["configs"].items()}
    for group, members in (results.get("group_subtasks") or {}).items():
        if group not in hashes and members:
            hashes[group] = _digest(sorted(hashes.get(m, "") for m in members))
    rows = []
    for task, values in results["results"].items():
        n = (results.get("n-samples") or {}).get(task, {}).get("effective", 0)
        for key, value in values.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            score = TaskScore(model, task, key, float(value), int(n), hashes.get(task, ""), note)
            rows.append(score)
    return rows


def _failed(model: str, error: Exception) -> RecipeError:
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return RecipeError(
        f"lm-evaluation-harness failed on `{model}`: {detail}. Check the task (its data must "
        "be readable here: offline, a hub dataset must be in the datasets cache).",
        key="tasks",
    )


def _skipped(model: str, settings: HarnessSettings, error: Exception) -> list[TaskScore]:
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    log.warning("compare: %s skipped on the harness tasks: %s", model, detail)
    note = (
        f"skipped: a vision-language model the harness' text-only `hf` model cannot run ({detail})"
    )
    return [TaskScore(model, task, "-", None, 0, "", note[:300]) for task in settings.tasks]


def task_hash(config: Mapping[str, Any]) -> str:
    """sha256 of a task's resolved config (as the harness reports it), with local data files
    named by the sha256 of their content rather than their path: the same prompt, metric,
    filters, generation settings and data give the same hash on any machine."""
    resolved = json.loads(json.dumps(config, default=str))
    files = (resolved.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, dict):
        resolved["dataset_kwargs"]["data_files"] = {
            split: _file_digest(path) for split, path in files.items()
        }
    return _digest(resolved)


def _file_digest(path: Any) -> Any:
    local = Path(str(path))
    if isinstance(path, str) and local.is_file():
        return "sha256:" + hashlib.sha256(local.read_bytes()).hexdigest()
    return path


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


@contextmanager
def _harness_session(settings: HarnessSettings) -> Iterator[None]:
    """The harness run quietly and, for shipped tasks, offline; everything restored after.

    Only shipped tasks: nothing asks the network (their data is local; `datasets` would
    otherwise ping S3 to count a download of its `json` builder, and reads its offline flag at
    import, so the flag is set where it is read). For the harness' own tasks the user's
    environment decides: their data may need downloading. The harness' git call (the commit of
    the working folder, in every result) and its per-model warnings are left out.
    """
    import datasets.config
    import huggingface_hub.constants
    import lm_eval.evaluator

    patches: list[tuple[Any, str, Any]] = [(lm_eval.evaluator, "get_git_commit_hash", _no_git)]
    if not set(settings.tasks) - set(shipped_tasks()):
        patches += [
            (datasets.config, "HF_HUB_OFFLINE", True),
            (datasets.config, "HF_DATASETS_OFFLINE", True),
            (huggingface_hub.constants, "HF_HUB_OFFLINE", True),
        ]
    before = [getattr(module, name) for module, name, _ in patches]
    harness_log = logging.getLogger("lm_eval")
    level = harness_log.level
    harness_log.setLevel(logging.ERROR)
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        harness_log.setLevel(level)
        for (module, name, _), value in zip(patches, before, strict=True):
            setattr(module, name, value)


def _no_git() -> None:
    return None
