"""Who may change anything: the holder of the server's token, from the server's own pages.

Reading stays as it was (every page, to whoever reaches the address; 127.0.0.1 by default).
Every request that changes state (start or stop a run, start a chat worker, ask it, upload a
picture) needs the token the server printed when it started, as part of its URL (as Jupyter
does), and is refused when it comes from another site's page:

- Opening the printed URL (`/?token=...`) stores the token in a cookie of this browser
  (HttpOnly, SameSite=Strict, for this port only) and takes the token out of the address bar.
- A page rendered for a request that carries that cookie holds the token in its forms and in
  a `<meta>` element its script reads; a state-changing request carries it back (a form field
  or the `X-Recipe-Engine-Token` header). The cookie alone is never enough: another site's
  page can make a browser send it, but cannot read the token from this server's pages.
- Its `Origin` (and, where a browser sends it, `Sec-Fetch-Site`) must be this server's own
  address: a page of another site is refused even with the right token.

A refusal is answered 403 with the reason, before anything is read, started or written.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.datastructures import FormData
from starlette.requests import Request

TOKEN_FIELD = "token"
TOKEN_HEADER = "x-recipe-engine-token"
COOKIE_PREFIX = "recipe_engine_token_"
# Form fields a state-changing form may hold, and how long each may be.
MAX_FIELDS = 64
MAX_FIELD_BYTES = 64 * 1024


class Forbidden(Exception):
    """A state-changing request without the server's token, or from another site (403)."""


def new_token() -> str:
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class Guard:
    """The server's token and the checks of every request that changes state."""

    token: str

    def cookie_name(self, request: Request) -> str:
        """One cookie per port: two servers on one host do not log each other out."""
        return f"{COOKIE_PREFIX}{request.url.port or 80}"

    def holds_cookie(self, request: Request) -> bool:
        """Whether this browser opened the server's URL with its token."""
        return self._same(request.cookies.get(self.cookie_name(request)))

    def page_token(self, request: Request) -> str | None:
        """The token a page may carry in its forms: only for the browser that holds it."""
        return self.token if self.holds_cookie(request) else None

    def check_origin(self, request: Request) -> None:
        """Refused: a request whose page belongs to another site."""
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin is not None and origin != own:
            raise Forbidden(
                f"refused: the request comes from another site's page (Origin: {origin}); "
                f"only this server's own pages ({own}) may start, stop or ask anything"
            )
        fetched = request.headers.get("sec-fetch-site")
        if fetched in ("cross-site", "same-site"):
            raise Forbidden(f"refused: the browser says the request is {fetched}")

    def check(self, request: Request, form: Mapping[str, object] | None = None) -> None:
        """The origin, then the token (the header, else the form's field)."""
        self.check_origin(request)
        given = request.headers.get(TOKEN_HEADER)
        if given is None and form is not None:
            value = form.get(TOKEN_FIELD)
            given = value if isinstance(value, str) else None
        if not given:
            raise Forbidden(
                "refused: no token. Open the address the server printed when it started "
                "(http://127.0.0.1:PORT/?token=...) in this browser, then try again"
            )
        if not self._same(given):
            raise Forbidden("refused: wrong token (not this server's: it changes at each start)")

    async def form(self, request: Request) -> FormData:
        """A state-changing form, checked: its origin first (nothing of another site's body is
        read), then its token. Files are not taken (pictures come as a body of their own)."""
        self.check_origin(request)
        form = await request.form(max_files=0, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
        self.check(request, form)
        return form

    def _same(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())
