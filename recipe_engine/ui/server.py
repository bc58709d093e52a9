"""Serving the UI: uvicorn on 127.0.0.1 unless another address is asked for (then a warning:
anyone who reaches that address reads the runs). A new token each start, printed as part of the
address (as Jupyter does): only a browser that opened that address can start, stop or chat."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.config.ui_options import DEFAULT_HOST, DEFAULT_MAX_UPLOAD_MB, DEFAULT_PORT
from recipe_engine.errors import RecipeError
from recipe_engine.ui.guard import TOKEN_FIELD, new_token

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServeSettings:
    root: Path  # the output_root served
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    config_dirs: tuple[str, ...] = ()  # --config-dir folders: their recipes can be started
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB
    token: str = field(default_factory=new_token)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def url_with_token(self) -> str:
        return f"{self.url}?{TOKEN_FIELD}={self.token}"


def bind_warning(host: str) -> str | None:
    """What binding to `host` exposes, when it is not this machine's loopback address."""
    if host in LOOPBACK:
        return None
    return (
        f"warning: serving on {host}, not 127.0.0.1: anyone who can reach this address reads "
        "every run, score and setting under output_root (changing anything needs the printed "
        "token). To share a view, prefer a tunnel to 127.0.0.1 (ssh -L PORT:127.0.0.1:PORT)."
    )


def allowed_hosts(host: str) -> list[str]:
    """The Host headers answered: on the loopback address only its names (a page of another
    site cannot reach the UI through a name it points at 127.0.0.1); elsewhere any."""
    return list(LOOPBACK) if host in LOOPBACK else ["*"]


def serve(settings: ServeSettings) -> None:
    """Listen (a port taken or an address not this machine's is one user error), say where,
    then serve until interrupted."""
    try:
        import multipart  # noqa: F401 (Starlette reads the workbench's forms with it)
        import uvicorn

        from recipe_engine.ui.app import create_app
        from recipe_engine.ui.workbench import Settings
    except ImportError as error:  # the `ui` extra is not installed
        raise RecipeError(
            f"`ui` needs the `ui` extra ({error.name} is not installed): "
            "pip install 'recipe-engine[ui]'."
        ) from None
    listening = _listen(settings)
    print(
        f"serving {settings.root} at {settings.url_with_token} (open this address to start, "
        "stop and chat from the browser; Ctrl-C stops)",
        flush=True,
    )
    bench = Settings(
        Path.cwd(), settings.config_dirs, sys.executable, int(settings.max_upload_mb * 2**20)
    )
    app = create_app(settings.root, allowed_hosts(settings.host), settings.token, bench)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[listening])


def _listen(settings: ServeSettings) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((settings.host, settings.port))
    except OSError as error:
        listening.close()
        raise RecipeError(
            f"Cannot serve at {settings.url}: {error.strerror or error}. Choose another port "
            "(ui.port=PORT) or an address of this machine (ui.host=...)."
        ) from None
    listening.listen(128)
    return listening
