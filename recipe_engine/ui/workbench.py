"""The routes that change something: start a run or a comparison (after `plan` said what it
would do), stop one, start it again, rerun a stage, and talk to a stage through a chat worker,
with a picture uploaded for a VLM stage. Every one is a POST checked by `ui.guard` (the
server's token, this server's own pages) before anything is read, started or written; a
refusal says why (403, or 400 for what the request asks) and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from recipe_engine.ui.chat_workers import (
    ChatWorkers,
    NotAPicture,
    Target,
    Uploads,
    chat_target,
)
from recipe_engine.ui.guard import Guard
from recipe_engine.ui.jobs import Jobs
from recipe_engine.ui.launch import Launcher, LaunchRequest
from recipe_engine.ui.override_rules import Unsafe
from recipe_engine.ui.paths import OutputFolder

MAX_PROMPT_CHARS = 4000
MAX_JSON_BYTES = 64 * 1024


class BadRequest(Exception):
    """What a state-changing request asks is refused (400, saying why; nothing changed)."""


@dataclass(frozen=True)
class Settings:
    """What the server was started with, besides output_root: the folder it started in (the
    runs' working folder, where reward files may be), its config folders, the interpreter
    that runs the engine's commands, the largest picture it takes."""

    start_dir: Path
    config_dirs: tuple[str, ...] = ()
    python: str = "python"
    max_upload_bytes: int = 10 * 2**20


class Workbench:
    """The state-changing handlers of one server, and what they share."""

    def __init__(self, folder: OutputFolder, guard: Guard, settings: Settings) -> None:
        self.folder = folder
        self.guard = guard
        self.settings = settings
        self.launcher = Launcher(
            folder.root, settings.start_dir, settings.config_dirs, settings.python
        )
        self.jobs = Jobs(folder.root, settings.python)
        self.workers = ChatWorkers(folder, settings.start_dir, settings.python)
        self.uploads = Uploads(folder.root, settings.max_upload_bytes)

    async def close(self) -> None:
        await self.workers.close()
        self.jobs.close()

    # ------------------------------------------------------------------ runs

    async def request_of(self, request: Request) -> LaunchRequest:
        form = await self.guard.form(request)
        return LaunchRequest.from_form(form, [str(v) for v in form.getlist("recipes")])

    async def plan(self, request: Request) -> tuple[LaunchRequest, Any]:
        """The request and its preview (or the reason it is refused, as text)."""
        asked = await self.request_of(request)
        try:
            return asked, await run_in_threadpool(self.launcher.preview, asked)
        except Unsafe as error:
            return asked, str(error)

    async def start(self, request: Request) -> Response:
        """The planned command started (checked again: the form comes back from the page)."""
        asked = await self.request_of(request)
        try:
            command = self.launcher.command(asked)
        except Unsafe as error:
            raise BadRequest(f"refused: {error}") from None
        recipes = [asked.recipe] if asked.verb == "run" else list(asked.recipes)
        job = self.jobs.start(command, recipes)
        return RedirectResponse(f"/job/{job.id}", status_code=303)

    async def stop(self, request: Request) -> Response:
        await self.guard.form(request)
        job = self.jobs.stop(request.path_params["id"])
        return RedirectResponse(f"/job/{job.id}", status_code=303)

    async def again(self, request: Request) -> Response:
        """The job's command once more: a stopped run resumes from its last checkpoint."""
        await self.guard.form(request)
        old = self.jobs.get(request.path_params["id"])
        if old.going:
            raise BadRequest(f"refused: job {old.id} is still {old.state}")
        job = self.jobs.start(old.command, old.recipes)
        return RedirectResponse(f"/job/{job.id}", status_code=303)

    # ------------------------------------------------------------------ chat

    async def _json(self, request: Request) -> dict[str, Any]:
        """A JSON request's body, after its origin and token are checked."""
        self.guard.check(request)
        body = await _body(request, MAX_JSON_BYTES)
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise BadRequest("refused: the body is not JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("refused: the body is not a JSON object")
        return data

    def _target(self, data: dict[str, Any]) -> Target:
        return chat_target(self.folder, str(data.get("run", "")), str(data.get("model", "")))

    async def chat_start(self, request: Request) -> Response:
        target = self._target(await self._json(request))
        return JSONResponse((await self.workers.start(target)).as_json())

    async def chat_stop(self, request: Request) -> Response:
        target = self._target(await self._json(request))
        return JSONResponse((await self.workers.stop(target)).as_json())

    async def chat_state(self, request: Request) -> Response:
        params = request.query_params
        target = chat_target(self.folder, params.get("run", ""), params.get("model", ""))
        return JSONResponse(self.workers.state(target).as_json())

    async def ask(self, request: Request) -> Response:
        """The answer as server-sent events: `text` as it is generated, then `answer`."""
        data = await self._json(request)
        target = self._target(data)
        prompt = str(data.get("prompt") or "").strip()
        if not prompt or len(prompt) > MAX_PROMPT_CHARS:
            raise BadRequest(f"refused: a question of 1 to {MAX_PROMPT_CHARS} characters")
        image = self.uploads.path(str(data["image"])) if data.get("image") else None
        events = self.workers.ask(target, prompt, image)
        # no-cache, not the pages' no-store (a POST's answer is never cached either way):
        # Chromium reports a no-store body read as a stream, to its end, as aborted
        # (microsoft/playwright#42742), which the browser tests would count as a failure.
        headers = {"Cache-Control": "no-cache"}
        return StreamingResponse(_sse(events), media_type="text/event-stream", headers=headers)

    async def upload(self, request: Request) -> Response:
        """A picture as the request's body, size-checked before and while it is read; kept
        under output_root by its content's hash."""
        self.guard.check(request)
        limit = self.settings.max_upload_bytes
        data = await _body(request, limit)
        try:
            name = await run_in_threadpool(self.uploads.keep, data)
        except NotAPicture as error:
            raise BadRequest(str(error)) from None
        return JSONResponse({"image": name})


async def _body(request: Request, limit: int) -> bytes:
    """The body, refused once it passes `limit` bytes (its declared length first: nothing is
    read of a body announced too large)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise TooLarge(f"refused: the body is larger than {_size(limit)}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"refused: the body is larger than {_size(limit)}")
        chunks.append(chunk)
    return b"".join(chunks)


class TooLarge(BadRequest):
    """A body over its limit (413)."""


def _size(count: int) -> str:
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count} bytes"


async def _sse(events: AsyncIterator[str]) -> AsyncIterator[str]:
    async for event in events:
        yield f"data: {event}\n\n"


def refusal(error: Exception) -> tuple[int, str]:
    """The status and reason of a refused state-changing request."""
    return (413 if isinstance(error, TooLarge) else 400), str(error)
