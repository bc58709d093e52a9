"""The UI's web application: Starlette routes over one output_root, every one GET only.

Pages are plain links (`/run/<run folder>`, `/run/<run folder>/stage/<name>`, `/store`,
`/reports`, `/report/<file>`, `/sweep/<folder>`), so each can be bookmarked or shared through a
tunnel; `/api/...` answers the same data as JSON for the pages' live updates, and `/files/...`
serves the records and charts the engine wrote. What a request names is checked by
`ui.paths` first: anything outside the engine's records is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from recipe_engine.files import JsonObject
from recipe_engine.ui.graph import layout
from recipe_engine.ui.paths import OutputFolder, Refused
from recipe_engine.ui.reports import comparisons, experiments, report_page, sweep_page, sweeps
from recipe_engine.ui.runs import RunView, StageView, in_order, list_runs, read_run, training_runs
from recipe_engine.ui.stage_detail import stage_curves, stage_detail
from recipe_engine.ui.store_page import store_page

HERE = Path(__file__).parent
# Scripts, styles and images only from this server; nothing inline runs, nothing is framed.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LIVE_POLL_MS = 2000


def create_app(root: Path, allowed_hosts: Sequence[str] = ("*",)) -> Starlette:
    """The application serving `root` (an output_root); `allowed_hosts`: the Host headers it
    answers (the loopback names when bound there, so another site cannot rebind a name to it)."""
    folder = OutputFolder.at(root)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(poll_ms=LIVE_POLL_MS, root=str(folder.root))
    pages = _Pages(folder, templates)
    get = ["GET"]
    routes = [
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
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
        Middleware(BaseHTTPMiddleware, dispatch=_headers),
    ]
    handlers = {Refused: pages.refused}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


async def _headers(request: Request, call_next: RequestResponseEndpoint) -> Response:
    response = await call_next(request)
    response.headers.update(HEADERS)
    return response


class _Pages:
    """The route handlers, over one output folder."""

    def __init__(self, folder: OutputFolder, templates: Jinja2Templates) -> None:
        self.folder = folder
        self.templates = templates

    def _page(self, request: Request, name: str, **context: Any) -> Response:
        return self.templates.TemplateResponse(request, name, context)

    def _run(self, request: Request) -> RunView:
        run_dir = self.folder.run_folder(request.path_params["path"])
        return read_run(self.folder, run_dir, training_runs(self.folder))

    def _stage(self, request: Request, run: RunView) -> StageView:
        name = request.path_params["name"]
        for stage in run.stages:
            if stage.name == name:
                return stage
        raise Refused(f"run `{run.path}` has no stage `{name}`")

    async def runs(self, request: Request) -> Response:
        return self._page(request, "runs.html", runs=list_runs(self.folder))

    async def run(self, request: Request) -> Response:
        run = self._run(request)
        run.stages = in_order(run.stages)
        return self._page(request, "run.html", run=run, graph=layout(run.stages))

    async def stage(self, request: Request) -> Response:
        run = self._run(request)
        detail = stage_detail(self.folder, self._stage(request, run))
        return self._page(request, "stage.html", run=run, detail=detail)

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
        report, html = report_page(self.folder, request.path_params["path"])
        return self._page(request, "report.html", report=report, html=html)

    async def sweep(self, request: Request) -> Response:
        return self._page(
            request, "sweep.html", sweep=sweep_page(self.folder, request.path_params["path"])
        )

    async def file(self, request: Request) -> Response:
        path = self.folder.engine_file(request.path_params["path"])
        media = None if path.suffix == ".png" else "text/plain; charset=utf-8"
        return FileResponse(path, media_type=media)

    async def refused(self, request: Request, error: Exception) -> Response:
        if request.url.path.startswith(("/api/", "/files/")):
            return JSONResponse({"refused": str(error)}, status_code=404)
        return self.templates.TemplateResponse(
            request, "refused.html", {"reason": str(error)}, status_code=404
        )


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
