"""``app(engine)``: the UI as a Starlette ASGI app (pages, actions, the live stream, its
own static files), errors as pages: an unknown run 404, a bad value 400, never a
traceback; behind :class:`~replay.ui.guard.TokenGate` when given a token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from engine import observe
from engine.errors import AgentlogError, CorruptData, RunNotFound, UsageError

from . import actions, live, pages, runpage
from .guard import Headers, TokenGate
from .news import News
from .render import HERE, error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from starlette.requests import Request
    from starlette.responses import Response

    from engine import Engine


def _status_of(exc: Exception) -> int:
    if isinstance(exc, RunNotFound):
        return 404
    if isinstance(exc, UsageError):
        return 400
    return 500


def _refused(request: Request, exc: Exception) -> Response:
    """An engine's refusal as the page of its one line (a damaged log says so: 500)."""
    what = "the log is damaged: " if isinstance(exc, CorruptData) else ""
    return error(request, _status_of(exc), what + str(exc))


def _http(request: Request, exc: Exception) -> Response:
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    text = "no such page" if code == 404 else (exc.detail if isinstance(exc, HTTPException) else "")
    return error(request, code, f"{text} ({request.url.path})")


def _broken(request: Request, exc: Exception) -> Response:
    """An unexpected error: one log line, and a page that says so (no traceback)."""
    observe.get().error("ui_error", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
    return error(request, 500, f"unexpected {type(exc).__name__}; the server's log says more")


def app(
    engine: Engine, *, token: str | None = None, hosts: Sequence[str] | None = None
) -> Starlette:
    """The UI over ``engine`` (its store, and its agents for the actions), an ASGI app to
    serve (``agentlog ui``) or mount in a server of yours; with ``token``, every request
    must present it (header, or the cookie a first ``?token=`` visit sets); with
    ``hosts``, a request naming another host is refused (a page of another site whose
    name was rebound to this address reads nothing)."""
    routes = [
        Route("/", pages.board),
        Route("/runs/{run_id}", pages.run),
        Route("/runs/{run_id}/state", pages.state),
        Route("/runs/{run_id}/{action}", actions.act, methods=["POST"]),
        Route("/diff", pages.diff),
        Route("/stats", pages.stats),
        Route("/live", live.stream),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    web = Starlette(
        routes=routes,
        middleware=[
            Middleware(Headers),
            *([Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))] if hosts else []),
            Middleware(TokenGate, token=token),
        ],
        exception_handlers={AgentlogError: _refused, HTTPException: _http, Exception: _broken},
    )
    web.state.engine = engine
    web.state.stories = runpage.Stories()
    web.state.news = News(engine.store)
    return web
