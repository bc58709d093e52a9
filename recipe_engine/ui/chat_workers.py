"""The view's chat: a worker process per model, `python -m recipe_engine chat RUN/STAGE
jsonl=true` (the engine's own verb; the server imports no torch), started and stopped from the
page, asked one question at a time; its answer is streamed back as it is generated.

The worker speaks JSON lines (`cli.chat.serve_jsonl`): `{"ready": ...}` once its model has
loaded (what it is, how it generates), then for each question `{"text": ...}` lines and one
`{"answer": ...}` or `{"error": ...}`. At most MAX_WORKERS are kept (a model each in memory):
starting another stops the one asked least recently. The server's end stops them all.

A picture for a VLM stage is uploaded first (`Uploads`): size-checked, checked to be a picture,
kept under `<output_root>/workbench/uploads/` by its content's hash; a question names it by
that name, and nothing else is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from recipe_engine.files import JsonObject, atomic_write_bytes
from recipe_engine.store.records import SUMMARY_FILE, RunSummary
from recipe_engine.ui.jobs import WORKBENCH
from recipe_engine.ui.paths import OutputFolder, Refused

MAX_WORKERS = 2
READY_TIMEOUT_S = 600
ANSWER_TIMEOUT_S = 600
STOP_GRACE_S = 10
_STAGE = re.compile(r"[\w.-]+")
_UPLOAD = re.compile(r"[0-9a-f]{20}\.(png|jpg|gif|webp)")
# A picture's first bytes -> the extension it is kept with.
_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "png",
    b"\xff\xd8\xff": "jpg",
    b"GIF87a": "gif",
    b"GIF89a": "gif",
}


class NotAPicture(ValueError):
    """An upload that is not a picture PIL reads (refused, nothing written)."""


@dataclass(frozen=True)
class Target:
    """A model of a finished run: a stage, or the run's base (`base`)."""

    run: str  # relative to output_root
    model: str

    @property
    def key(self) -> str:
        return f"{self.run}/{self.model}"


def chat_target(folder: OutputFolder, run: str, model: str) -> Target:
    """The target a request names, checked: a finished run under output_root, one of its
    stages or its base. (The worker refuses a stage without weights with its own message.)"""
    run_dir = folder.run_folder(run)
    if not (run_dir / SUMMARY_FILE).is_file():
        raise Refused(f"run `{run}` has not finished: its stages are not all committed yet")
    stages = [row.stage for row in RunSummary.load(run_dir).stages]
    if not _STAGE.fullmatch(model) or model not in (*stages, "base"):
        raise Refused(f"`{model}` is not a stage of run `{run}` (nor its base)")
    return Target(run, model)


WorkerState = Literal["loading", "ready", "failed", "stopped"]


@dataclass(frozen=True)
class WorkerStatus:
    """A chat worker's state as the page shows it; `ready` is what the worker said once its
    model loaded (the model, its generation settings), passed on as it said it."""

    state: WorkerState
    error: str = ""
    ready: JsonObject = field(default_factory=dict)

    def as_json(self) -> JsonObject:
        return {"state": self.state, "error": self.error, **self.ready}


STOPPED = WorkerStatus("stopped")


@dataclass
class Worker:
    """One chat worker process and what it said of itself."""

    target: Target
    process: asyncio.subprocess.Process
    log: Path
    state: WorkerState = "loading"
    ready: JsonObject = field(default_factory=dict)
    error: str = ""
    asked: float = field(default_factory=time.time)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: asyncio.Task | None = None

    @property
    def status(self) -> WorkerStatus:
        return WorkerStatus(self.state, self.error, self.ready)


class ChatWorkers:
    """The chat workers of one server."""

    def __init__(self, folder: OutputFolder, start_dir: Path, python: str) -> None:
        self.folder = folder
        self.start_dir = start_dir
        self.python = python
        self.logs = folder.root / WORKBENCH / "chat"
        self._workers: dict[str, Worker] = {}

    def state(self, target: Target) -> WorkerStatus:
        worker = self._workers.get(target.key)
        return worker.status if worker else STOPPED

    async def start(self, target: Target) -> WorkerStatus:
        """The target's worker, started unless it is (the least recently asked stopped first
        when MAX_WORKERS are running)."""
        worker = self._workers.get(target.key)
        if worker is not None and worker.state in ("loading", "ready"):
            return worker.status
        going = sorted(self._workers.values(), key=lambda w: w.asked)
        while len(going) >= MAX_WORKERS:
            await self.stop(going.pop(0).target)
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{hashlib.sha256(target.key.encode()).hexdigest()[:16]}.log"
        run_dir = self.folder.root / target.run
        with log.open("wb") as errors:
            process = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "recipe_engine",
                "chat",
                f"{run_dir}/{target.model}",
                "jsonl=true",
                f"output_root={self.folder.root}",
                cwd=self.start_dir,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errors,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                limit=2**20,
            )
        worker = Worker(target, process, log)
        worker.waiting = asyncio.create_task(self._until_ready(worker))
        self._workers[target.key] = worker
        return worker.status

    async def _until_ready(self, worker: Worker) -> None:
        event = await self._event(worker, READY_TIMEOUT_S)
        if event is not None and "ready" in event:
            worker.state, worker.ready = "ready", dict(event["ready"])
        else:
            worker.state = "failed"
            worker.error = self._failure(worker, event)

    async def _event(self, worker: Worker, timeout: float) -> dict[str, Any] | None:
        """The worker's next JSON line (None: it ended, or said nothing in time)."""
        assert worker.process.stdout is not None
        try:
            line = await asyncio.wait_for(worker.process.stdout.readline(), timeout)
        except (TimeoutError, ValueError):
            return None
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            return {"error": f"the worker said: {line.decode(errors='replace')[:300]}"}
        return event if isinstance(event, dict) else None

    def _failure(self, worker: Worker, event: dict[str, Any] | None) -> str:
        """Why a worker did not answer: its own `error` line, else its last error line."""
        if event is not None and "error" in event:
            return str(event["error"])
        lines = worker.log.read_text(errors="replace").splitlines() if worker.log.is_file() else []
        said = [line for line in lines if line.startswith("error:")] or lines[-1:]
        return said[-1] if said else "the worker ended without a word"

    async def stop(self, target: Target) -> WorkerStatus:
        worker = self._workers.pop(target.key, None)
        if worker is not None:
            await _end(worker)
        return STOPPED

    async def close(self) -> None:
        for worker in list(self._workers.values()):
            await _end(worker)
        self._workers.clear()

    async def ask(self, target: Target, prompt: str, image: Path | None) -> AsyncIterator[str]:
        """The worker's events for one question, each a JSON object's text as the browser
        reads it: text as it comes, then the answer (or an error)."""
        async for event in self._events(target, prompt, image):
            yield json.dumps(event)

    async def _events(
        self, target: Target, prompt: str, image: Path | None
    ) -> AsyncIterator[JsonObject]:
        worker = self._workers.get(target.key)
        if worker is None or worker.state == "stopped":
            yield {"error": "the chat worker is not running: start it first"}
            return
        if worker.waiting is not None:
            await worker.waiting
        if worker.state != "ready":
            yield {"error": worker.error or "the chat worker did not start"}
            return
        async with worker.lock:
            worker.asked = time.time()
            question = {"prompt": prompt, **({"image": str(image)} if image else {})}
            assert worker.process.stdin is not None
            worker.process.stdin.write((json.dumps(question) + "\n").encode())
            await worker.process.stdin.drain()
            while True:
                event = await self._event(worker, ANSWER_TIMEOUT_S)
                if event is None:
                    worker.state = "failed"
                    worker.error = self._failure(worker, None)
                    yield {"error": worker.error}
                    return
                yield event
                if "answer" in event or "error" in event:
                    return


async def _end(worker: Worker) -> None:
    """End of input (the worker's loop ends), then SIGTERM, then SIGKILL."""
    worker.state = "stopped"
    if worker.waiting is not None:
        worker.waiting.cancel()
    process = worker.process
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    for signal_it in (process.terminate, process.kill):
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
            return
        except TimeoutError:
            signal_it()
    await process.wait()


class Uploads:
    """Pictures uploaded for a VLM stage, under `<output_root>/workbench/uploads/`."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.folder = root / WORKBENCH / "uploads"
        self.max_bytes = max_bytes

    def keep(self, data: bytes) -> str:
        """The picture kept by its content's hash: its name. Refused (nothing written) when
        it is not a picture PIL reads."""
        extension = next((ext for magic, ext in _MAGIC.items() if data.startswith(magic)), None)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            extension = "webp"
        if extension is None:
            raise NotAPicture("refused: the upload is not a PNG, JPEG, GIF or WebP picture")
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as image:
                image.verify()
        except (UnidentifiedImageError, OSError, SyntaxError) as error:
            raise NotAPicture(f"refused: the picture does not read ({error})") from None
        name = f"{hashlib.sha256(data).hexdigest()[:20]}.{extension}"
        path = self.folder / name
        if not path.is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        return name

    def path(self, name: str) -> Path:
        """An uploaded picture by its name: nothing else is read."""
        path = self.folder / name
        if not _UPLOAD.fullmatch(name) or not path.is_file() or path.is_symlink():
            raise Refused(f"`{name}` is not a picture uploaded to this view")
        return path
