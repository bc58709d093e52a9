"""Talking to one committed model: a stage of a run (or the run's base), or a store entry,
loaded exactly as `compare` loads it (`evaluate.probing`: a full-weights stage as it is, an
adapter on its full-precision base), asked one question at a time as `compare` asks a probe
(`run.evaluation.answer_batch`, the same prompt through the chat template, the same
generation settings), its answer streamed as it is generated.

So a question that is one of the run's probes gets the answer `compare` records for it with
the same settings: each question is asked on its own, with no history (the engine's stages
are trained and measured on single questions; a conversation would be a different question).

Finding the model reads records only; the weights load when `load` is called, so a stage that
is not committed is refused before torch is imported.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from recipe_engine.config.compare import EvalOverrides
from recipe_engine.config.schema import EngineConfig, EvalConfig
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.evaluate.probing import (
    Loader,
    lineage_loaders,
    model_loaders,
    run_settings,
    run_stages,
)
from recipe_engine.store.records import EVALUATION, SUMMARY_FILE, Manifest, RunSummary
from recipe_engine.store.scores import Generation, Stage
from recipe_engine.store.stage_records import known_fields
from recipe_engine.store.store import COMPLETE, ENGINE_MARKER, KEY_LENGTH

# A store key as typed: its first characters will do.
KEY = re.compile(r"^[0-9a-f]{6,40}$")
PARTIAL = ".partial"


@dataclass(frozen=True)
class Question:
    """One question: its text, a system turn before it, and a picture (a VLM stage)."""

    prompt: str
    system: str | None = None
    image: Path | None = None


@dataclass(frozen=True)
class ChatModel:
    """A committed model found by what the user named, not loaded yet: what it is called,
    its kind (causal_lm, vlm), how it generates and what loads it."""

    label: str  # "stage llm of outputs/runs/r3-two-stage/<time>", "store entry <key> (llm)"
    name: str  # its name in a comparison: the stage's, or the run's base
    kind: str
    generation: Generation
    loader: Loader

    def settings_text(self) -> str:
        """ "max_new_tokens=8, do_sample=False, ..., seed=42": what every answer is made with
        (batch_size is not one: a question is answered on its own)."""
        pairs = [(k, v) for k, v in self.generation.settings() if k != "batch_size"]
        return ", ".join(f"{k}={v}" for k, v in [*pairs, ("seed", self.generation.seed)])


def find_model(
    target: str,
    output_root: Path,
    settings: EvalOverrides | None = None,
    seed: int | None = None,
) -> ChatModel:
    """The committed model `target` names: `RUN_DIR/STAGE` or `RUN_DIR:STAGE` (`base`: the
    run's base model), a run folder (its last stage with weights), a store folder, or a store
    key (its first characters will do, looked up under `output_root/store`). Anything not
    committed is refused with what to do, before any weight loads."""
    path = Path(target).expanduser()
    run, sep, stage = target.rpartition(":")
    if sep and run and _is_run(Path(run).expanduser()):
        return _run_model(Path(run).expanduser(), stage, settings, seed)
    if _is_run(path.parent) and not _is_run(path) and path.name:
        return _run_model(path.parent, path.name, settings, seed)
    if _is_run(path):
        return _run_model(path, None, settings, seed)
    if path.name.endswith(PARTIAL) or (path / "manifest.json").is_file():
        return _store_model(path, settings, seed)
    if KEY.match(target):
        return _store_model(_store_key(target, output_root / "store"), settings, seed)
    what = "does not exist" if not path.exists() else "is neither a run, a stage nor a store entry"
    raise RecipeError(
        f"Cannot chat with `{target}`: it {what}. Name a committed stage: RUN_DIR/STAGE "
        "(outputs/runs/<recipe>/<time>/llm), RUN_DIR/base, a store folder or a store key.",
        key="chat",
    )


def _is_run(path: Path) -> bool:
    """A run folder: its summary, or (not finished) the engine's mark and Hydra's config; a
    store entry has the mark too, but no Hydra config."""
    marked = (path / ENGINE_MARKER).is_file() and (path / ".hydra").is_dir()
    return path.is_dir() and (marked or (path / SUMMARY_FILE).is_file())


def _run_model(
    run_dir: Path, stage: str | None, settings: EvalOverrides | None, seed: int | None
) -> ChatModel:
    if not (run_dir / SUMMARY_FILE).is_file():
        named = f"Stage `{stage}` of {run_dir}" if stage else f"Run {run_dir}"
        raise RecipeError(
            f"{named} is not committed: the run has not finished (no {SUMMARY_FILE}; it is "
            "training, stopped or failed). Chat with it once it has committed (`runs` and the "
            "web view show its state), or name a store entry that has.",
            key="chat",
        )
    stages = run_stages(run_dir)  # every stage with weights, each checked to be complete
    if not stages:
        raise RecipeError(f"Run {run_dir} has no stage with weights: nothing to chat with.")
    kind, loaders = model_loaders(run_dir)
    names = [loader[0] for loader in loaders]
    wanted = stages[-1][0] if stage is None else stage
    if wanted == "base" and "base" not in names:
        wanted = names[0]  # a stage is called `base`: the run's base is `base_model`
    if wanted not in names:
        listed = [row.stage for row in RunSummary.load(run_dir).stages]
        why = (
            "holds no weights (an evaluation stage)"
            if wanted in listed
            else f"is not one of its stages.{did_you_mean(wanted, names)}"
        )
        raise RecipeError(f"`{wanted}` of {run_dir} {why} Models: {', '.join(names)}.", key="chat")
    loader = loaders[names.index(wanted)]
    base = loader is loaders[0]
    run = run_settings(run_dir)
    label = f"the base model of {run_dir}" if base else f"stage {wanted} of {run_dir}"
    generation = _generation(run.eval, run.seed, settings, seed)
    return ChatModel(label, wanted, kind, generation, loader)


def _store_model(folder: Path, settings: EvalOverrides | None, seed: int | None) -> ChatModel:
    entry = folder.name
    if entry.endswith(PARTIAL) or not (folder / COMPLETE).is_file():
        raise RecipeError(
            f"Store entry {folder} is not committed (no {COMPLETE} marker: its stage is "
            "training, or stopped before it committed; a rerun of its recipe resumes it). "
            "Chat with it once it has committed.",
            key="chat",
        )
    stages = _lineage(folder)
    name, _, manifest = stages[-1]
    if manifest.format == EVALUATION:
        raise RecipeError(
            f"Store entry {folder} is an evaluation stage: it holds results, no weights.",
            key="chat",
        )
    loader = lineage_loaders(stages)[-1]
    recorded = EvalConfig(**known_fields(EvalConfig, manifest.eval_settings or {}))
    generation = _generation(recorded, EngineConfig.seed, settings, seed)
    label = f"store entry {entry[:KEY_LENGTH]} (stage {name} of {manifest.recipe})"
    return ChatModel(label, name, manifest.kind, generation, loader)


def _lineage(folder: Path) -> list[Stage]:
    """The entry and its committed ancestors (by their parent keys), root first: what loads
    an adapter's base when its merged handoff folder is gone, as a run's stages do."""
    found: list[Stage] = []
    while True:
        manifest = Manifest.load(folder)
        if manifest.format != EVALUATION or not found:
            found.insert(0, (manifest.stage, folder, manifest))
        parent = manifest.parent_fingerprint
        folder = folder.parent / parent[:KEY_LENGTH] if parent else folder
        if not parent or not (folder / COMPLETE).is_file():
            return found


def _store_key(key: str, store: Path) -> Path:
    found = sorted(store.glob(f"{key}*")) if store.is_dir() else []
    committed = [p for p in found if (p / "manifest.json").is_file()]
    if len(committed) == 1:
        return committed[0]
    partial = [p for p in found if p.name.endswith(PARTIAL)]
    if not committed and len(partial) == 1:
        return partial[0]  # refused with why (not committed)
    what = "no stage" if not found else f"{len(found)} entries"
    raise RecipeError(
        f"Store key `{key}` matches {what} in {store}; give more of it (or output_root=DIR, "
        "the folder the run wrote).",
        key="chat",
    )


def _generation(
    evaluation: EvalConfig, seed: int, settings: EvalOverrides | None, given_seed: int | None
) -> Generation:
    """The run's generation settings, the command line's eval.* and seed over them."""
    chosen = settings.over(evaluation) if settings else evaluation
    generation = Generation.from_settings(chosen.__dict__, seed)
    return replace(generation, seed=given_seed) if given_seed is not None else generation


# --------------------------------------------------------------------------- talking


class Chat:
    """A loaded model answering questions one at a time."""

    def __init__(self, found: ChatModel) -> None:
        self.found = found
        self.model, self.processor = found.loader[1]()
        self.model.requires_grad_(False)
        self.model.eval()

    def answer(self, question: Question, on_text: Callable[[str], None] | None = None) -> str:
        """The answer `compare` would record for this question (one row, the same prompt and
        settings); `on_text` is shown the text as it is generated, in this thread."""
        import torch
        from transformers import TextIteratorStreamer

        from recipe_engine.run.evaluation import answer_batch

        row = _question_row(question, self.found.kind)
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        result: dict[str, Any] = {}

        def generate() -> None:
            try:
                torch.manual_seed(self.found.generation.seed)  # as generate_answers seeds
                result["answers"] = answer_batch(
                    self.model,
                    self.processor,
                    [row],
                    self.found.generation,
                    streamer=streamer,
                )
            except BaseException as error:  # shown in the caller's thread
                result["error"] = error
                streamer.end()

        worker = threading.Thread(target=generate, name="chat-generate", daemon=True)
        worker.start()
        for text in streamer:
            if on_text is not None and text:
                on_text(text)
        worker.join()
        if "error" in result:
            raise result["error"]
        return str(result["answers"][0])


def check_question(question: Question, kind: str) -> None:
    """What would stop the question being asked, refused before any weight loads: a picture
    for a text model, or one that does not read."""
    _question_row(question, kind)


def _question_row(question: Question, kind: str) -> dict[str, Any]:
    """The question as a conversational prompt row (TRL's shape; `run.evaluation.prompt_text`
    puts it through the chat template as it does a probe's question): a VLM's turn as content
    parts, the picture first, as the engine's image rows are written."""
    if question.image is not None and kind != "vlm":
        raise RecipeError(
            "`image=` is for a vision-language stage; this model reads text only.", key="image"
        )
    images = [open_image(question.image)] if question.image is not None else []
    content: Any = question.prompt
    if kind == "vlm":
        content = [{"type": "text", "text": question.prompt}]
        if images:
            content.insert(0, {"type": "image"})
    turns = [{"role": "system", "content": question.system}] if question.system else []
    if kind == "vlm" and turns:
        turns[0]["content"] = [{"type": "text", "text": question.system}]
    return {"prompt": [*turns, {"role": "user", "content": content}], "images": images}


def open_image(path: Path) -> Any:
    """The picture as training decodes it (datasets' Image feature in RGB mode)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise RecipeError(f"`image={path}`: no such file.", key="image") from None
    except (UnidentifiedImageError, OSError) as error:
        raise RecipeError(
            f"`image={path}` is not a picture PIL can read ({error}). Give a PNG or JPEG file.",
            key="image",
        ) from None
