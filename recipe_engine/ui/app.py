"""The UI's web application: Starlette routes over one output_root.

Pages are plain links (`/run/<run folder>`, `/run/<run folder>/stage/<name>`, `/store`,
`/reports`, `/report/<file>`, `/sweep/<folder>`, `/launch`, `/job/<id>`, `/chat`,
`/overlay?run=...`), so each can be bookmarked or shared through a tunnel; `/api/...` answers
the same data as JSON for the pages' live updates, and `/files/...` serves the records and
charts the engine wrote. What a request names is checked by `ui.paths` first: anything outside
the engine's records is refused. Reading is GET only; what changes anything (start, stop, chat,
upload) is a POST that `ui.workbench` answers after `ui.guard` checked the server's token and
the page it came from.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from recipe_engine.files import JsonObject
from recipe_engine.store.records import EVALUATION, SUMMARY_FILE
from recipe_engine.ui.graph import layout
from recipe_engine.ui.guard import TOKEN_FIELD, Forbidden, Guard, new_token
from recipe_engine.ui.launch import LaunchRequest, rerun_request
from recipe_engine.ui.overlay import (
    MAX_RUNS,
    RunChoice,
    experiment_groups,
    label_of,
    overlay,
    sweep_runs,
    ticked,
)
from recipe_engine.ui.paths import OutputFolder, Refused
from recipe_engine.ui.reports import comparisons, experiments, report_page, sweep_page, sweeps
from recipe_engine.ui.runs import RunView, StageView, in_order, list_runs, read_run, training_runs
from recipe_engine.ui.stage_detail import stage_curves, stage_detail
from recipe_engine.ui.store_page import store_page
from recipe_engine.ui.workbench import BadRequest, Settings, Workbench, refusal

HERE = Path(__file__).parent
# Scripts, styles and images only from this server; nothing inline runs, nothing is framed;
# forms post only to it (a picture chosen for the chat is previewed from the browser's memory).
# `same-origin`, not `no-referrer`: with no-referrer a browser sends `Origin: null` on a form's
# POST, and the guard could not tell this server's pages from a sandboxed one's; no address
# leaves for another site either way.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
LIVE_POLL_MS = 2000


def create_app(
    root: Path,
    allowed_hosts: Sequence[str] = ("*",),
    token: str | None = None,
    settings: Settings | None = None,
) -> Starlette:
    """The application serving `root` (an output_root); `allowed_hosts`: the Host headers it
    answers (the loopback names when bound there, so another site cannot rebind a name to it);
    `token`: what a request that changes anything must carry (a new one when not given);
    `settings`: the folder it started in, its config folders, its interpreter."""
    folder = OutputFolder.at(root)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(
        poll_ms=LIVE_POLL_MS, root=str(folder.root), token_field=TOKEN_FIELD
    )
    guard = Guard(token or new_token())
    bench = Workbench(folder, guard, settings or Settings(Path.cwd(), python=sys.executable))
    pages = _Pages(folder, templates, guard, bench)
    routes = _routes(pages, bench)
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
        Middleware(BaseHTTPMiddleware, dispatch=_headers),
        Middleware(BaseHTTPMiddleware, dispatch=pages.token_link),
    ]
    handlers = {Refused: pages.refused, Forbidden: pages.forbidden, BadRequest: pages.bad_request}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await bench.close()  # chat workers end with the server; runs go on

    return Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=lifespan
    )


async def _headers(request: Request, call_next: RequestResponseEndpoint) -> Response:
    """Every response's security headers (a route's own Cache-Control kept: the chat's)."""
    response = await call_next(request)
    own = "cache-control" in response.headers
    response.headers.update({k: v for k, v in HEADERS.items() if k != "Cache-Control" or not own})
    return response


def _routes(pages: _Pages, bench: Workbench) -> list[Route | Mount]:
    """The pages (GET) and what changes something (POST: the workbench's)."""
    get, post = ["GET"], ["POST"]
    return [
        Route("/", pages.runs, methods=get),
        Route("/run/{path:path}/stage/{name}", pages.stage, methods=get),
        Route("/run/{path:path}", pages.run, methods=get),
        Route("/api/run/{path:path}/stage/{name}", pages.stage_json, methods=get),
        Route("/api/run/{path:path}", pages.run_json, methods=get),
        Route("/store", pages.store, methods=get),
        Route("/reports", pages.reports, methods=get),
        Route("/report/{path:path}", pages.report, methods=get),
        Route("/sweep/{path:path}", pages.sweep, methods=get),
        Route("/files/{path:path}", pages.file, methods=get),
        Route("/overlay", pages.overlay, methods=get),
        Route("/launch", pages.launch, methods=get),
        Route("/launch/plan", pages.plan, methods=post),
        Route("/launch/start", bench.start, methods=post),
        Route("/job/{id}", pages.job, methods=get),
        Route("/api/job/{id}", pages.job_json, methods=get),
        Route("/job/{id}/stop", bench.stop, methods=post),
        Route("/job/{id}/again", bench.again, methods=post),
        Route("/chat", pages.chat, methods=get),
        Route("/api/chat/state", bench.chat_state, methods=get),
        Route("/api/chat/start", bench.chat_start, methods=post),
        Route("/api/chat/stop", bench.chat_stop, methods=post),
        Route("/api/chat/ask", bench.ask, methods=post),
        Route("/api/upload", bench.upload, methods=post),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


class _Pages:
    """The route handlers that read, over one output folder."""

    def __init__(
        self, folder: OutputFolder, templates: Jinja2Templates, guard: Guard, bench: Workbench
    ) -> None:
        self.folder = folder
        self.templates = templates
        self.guard = guard
        self.bench = bench

    async def token_link(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """The printed address (`?token=...`): the token kept in this browser's cookie, then
        the same page without it in the address bar (nor in the history)."""
        given = request.query_params.get(TOKEN_FIELD)
        if request.method != "GET" or given is None:
            return await call_next(request)
        if given != self.guard.token:
            return await self.forbidden(request, Forbidden("wrong token in the address"))
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_FIELD]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            self.guard.cookie_name(request), given, httponly=True, samesite="strict", path="/"
        )
        return response

    def _page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context["token"] = self.guard.page_token(request)
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _run(self, request: Request) -> RunView:
        run_dir = self.folder.run_folder(request.path_params["path"])
        run = read_run(self.folder, run_dir, training_runs(self.folder))
        job = self.bench.jobs.job_of_run(run.path)
        if job is not None and not job.going and run.state == "running":
            # its process has ended without a summary: stopped now, not after QUIET_S
            run.state = "stopped" if job.state == "stopped" else "failed"
            run.reason = f"its process ended ({job.state}, exit code {job.returncode})"
            for stage in run.stages:
                if stage.state == "training":
                    stage.state, stage.detail = "failed", run.reason
        return run

    def _stage(self, request: Request, run: RunView) -> StageView:
        name = request.path_params["name"]
        for stage in run.stages:
            if stage.name == name:
                return stage
        raise Refused(f"run `{run.path}` has no stage `{name}`")

    async def runs(self, request: Request) -> Response:
        return self._page(request, "runs.html", runs=list_runs(self.folder), max_runs=MAX_RUNS)

    async def run(self, request: Request) -> Response:
        run = self._run(request)
        run.stages = in_order(run.stages)
        job = self.bench.jobs.job_of_run(run.path)
        return self._page(request, "run.html", run=run, graph=layout(run.stages), job=job)

    async def stage(self, request: Request) -> Response:
        run = self._run(request)
        stage = self._stage(request, run)
        detail = stage_detail(self.folder, stage)
        manifest = stage.manifest(self.folder.root / "store")
        finished = (self.folder.root / run.path / SUMMARY_FILE).is_file()
        chat = finished and manifest is not None and manifest.format != EVALUATION
        kind = manifest.kind if manifest is not None else None
        return self._page(request, "stage.html", run=run, detail=detail, chat=chat, kind=kind)

    async def run_json(self, request: Request) -> Response:
        return JSONResponse(_run_json(self._run(request)))

    async def stage_json(self, request: Request) -> Response:
        run = self._run(request)
        stage = self._stage(request, run)
        curves = stage_curves(self.folder.root / "store", stage)
        body = {
            **_stage_json(stage),
            "run_state": run.state,
            "curves": [c.as_json() for c in curves],
        }
        return JSONResponse(body)

    async def store(self, request: Request) -> Response:
        return self._page(request, "store.html", store=store_page(self.folder))

    async def reports(self, request: Request) -> Response:
        return self._page(
            request,
            "reports.html",
            experiments=experiments(self.folder),
            comparisons=comparisons(self.folder),
            sweeps=sweeps(self.folder),
        )

    async def report(self, request: Request) -> Response:
        relative = request.path_params["path"]
        report, html = report_page(self.folder, relative)
        groups, charts = None, []
        if relative.startswith("experiments/") and relative.endswith("/experiment.md"):
            groups = experiment_groups(self.folder, relative)
            runs = ticked(request.query_params.getlist("run"), [m.run for m in groups.members()])
            charts = overlay(self.folder, runs, groups.labels())
        return self._page(
            request,
            "report.html",
            report=report,
            html=html,
            groups=groups,
            charts=charts,
            ticked=request.query_params.getlist("run"),
        )

    async def sweep(self, request: Request) -> Response:
        sweep = sweep_page(self.folder, request.path_params["path"])
        runs = sweep_runs(self.folder, sweep.path, sweep.outputs)
        offered = [run for run in runs if run]
        chosen = ticked(request.query_params.getlist("run"), offered)
        labels = {run: f"job {row[0]}" for run, row in zip(runs, sweep.rows, strict=True) if run}
        charts = overlay(self.folder, chosen, labels)
        return self._page(
            request, "sweep.html", sweep=sweep, runs=runs, charts=charts, ticked=chosen
        )

    async def overlay(self, request: Request) -> Response:
        """The ticked runs' curves on shared charts (from the runs page)."""
        offered = [run.path for run in list_runs(self.folder)]
        chosen = ticked(request.query_params.getlist("run"), offered)
        charts = overlay(self.folder, chosen, {run: label_of(run) for run in chosen})
        choices = [RunChoice(run, label_of(run), run in chosen) for run in offered]
        return self._page(
            request, "overlay.html", charts=charts, choices=choices, max_runs=MAX_RUNS
        )

    async def file(self, request: Request) -> Response:
        path = self.folder.engine_file(request.path_params["path"])
        media = None if path.suffix == ".png" else "text/plain; charset=utf-8"
        return FileResponse(path, media_type=media)

    # ------------------------------------------------------------------ the workbench's pages

    async def launch(self, request: Request) -> Response:
        """The start form; `?rerun=RUN&stage=NAME` fills it to retrain a stage of a run."""
        params = request.query_params
        asked = LaunchRequest(recipe="r3-two-stage")
        if params.get("rerun") and params.get("stage"):
            run_dir = self.folder.run_folder(params["rerun"])
            asked = rerun_request(run_dir, params["stage"])
        return self._launch_page(request, asked, None)

    async def plan(self, request: Request) -> Response:
        asked, preview = await self.bench.plan(request)
        return self._launch_page(request, asked, preview)

    def _launch_page(self, request: Request, asked: LaunchRequest, preview: Any) -> Response:
        refused = isinstance(preview, str) or (preview is not None and not preview.startable)
        return self._page(
            request,
            "launch.html",
            400 if refused else 200,
            asked=asked,
            preview=preview,
            choices=self.bench.launcher.choices(),
            jobs=self.bench.jobs.all(),
        )

    async def job(self, request: Request) -> Response:
        job = self.bench.jobs.get(request.path_params["id"])
        jobs = self.bench.jobs
        return self._page(
            request,
            "job.html",
            job=job,
            output=jobs.output(job),
            runs=jobs.run_folders(job),
            events=jobs.events(job),
        )

    async def job_json(self, request: Request) -> Response:
        job = self.bench.jobs.get(request.path_params["id"])
        jobs = self.bench.jobs
        body = {
            "id": job.id,
            "state": job.state,
            "returncode": job.returncode,
            "runs": jobs.run_folders(job),
            "events": jobs.events(job),
            "output": jobs.output(job)[-8000:],
        }
        return JSONResponse(body)

    async def chat(self, request: Request) -> Response:
        """Two models side by side on the same question: `?a=RUN|MODEL&b=RUN|MODEL`."""
        models = []
        for run in list_runs(self.folder):
            if run.state == "finished":
                names = [s.name for s in run.stages if s.state in ("committed", "cached")]
                models += [(run.path, name) for name in ("base", *names)]
        sides = []
        for side in ("a", "b"):
            run, _, model = request.query_params.get(side, "").partition("|")
            sides.append((run, model) if (run, model) in models else None)
        return self._page(request, "chat.html", models=models, sides=sides)

    # ------------------------------------------------------------------ refusals

    async def refused(self, request: Request, error: Exception) -> Response:
        if request.url.path.startswith(("/api/", "/files/")):
            return JSONResponse({"refused": str(error)}, status_code=404)
        return self._page(request, "refused.html", 404, reason=str(error))

    async def forbidden(self, request: Request, error: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"refused": str(error)}, status_code=403)
        return self._page(request, "forbidden.html", 403, reason=str(error))

    async def bad_request(self, request: Request, error: Exception) -> Response:
        status, reason = refusal(error)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"refused": reason}, status_code=status)
        return self._page(request, "forbidden.html", status, reason=reason)


def _stage_json(stage: StageView) -> JsonObject:
    progress = stage.progress
    return {
        "name": stage.name,
        "state": stage.state,
        "key": stage.key,
        "detail": stage.detail,
        "step": progress.step if progress else None,
        "total": progress.total if progress else None,
    }


def _run_json(run: RunView) -> JsonObject:
    return {
        "path": run.path,
        "recipe": run.recipe,
        "state": run.state,
        "reason": run.reason,
        "score": run.score,
        "stages": [_stage_json(stage) for stage in run.stages],
    }
