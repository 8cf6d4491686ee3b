"""The UI's gate: an access token checked on every request (a header, or the cookie a first
visit with ``?token=`` sets), and a CSRF token every POST must carry (double submit: a
random cookie and the same value in the form, compared in constant time)."""

from __future__ import annotations

import hmac
import secrets
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.responses import PlainTextResponse, RedirectResponse, Response

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_COOKIE = "agentlog_token"
CSRF_COOKIE = "agentlog_csrf"
CSRF_FIELD = "csrf"
TOKEN_HEADER = "x-agentlog-token"


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in constant time (None never is)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def csrf_of(request: Request) -> str:
    """The browser's CSRF value (its cookie), or a new one the response will set."""
    found = request.cookies.get(CSRF_COOKIE)
    if found and len(found) == 43 and found.replace("-", "").replace("_", "").isalnum():
        return found
    made: str = request.state.__dict__.setdefault("new_csrf", secrets.token_urlsafe(32))
    return made


def with_csrf_cookie(request: Request, response: Response) -> Response:
    """``response`` setting the CSRF cookie if this request made the value."""
    made = request.state.__dict__.get("new_csrf")
    if made:
        response.set_cookie(CSRF_COOKIE, made, httponly=True, samesite="strict")
    return response


def csrf_ok(request: Request, form_value: object) -> bool:
    """Whether a POST carries the browser's CSRF value in its form."""
    cookie = request.cookies.get(CSRF_COOKIE)
    return isinstance(form_value, str) and cookie is not None and same(form_value, cookie)


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this UI: its ``Origin`` (browsers send one with
    every POST) names the host it was sent to; a request without one (a script) passes."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin.split("://", 1)[-1] == request.headers.get("host", "")


HEADERS = [
    # no script but the UI's own file, no frame around its buttons (clickjacking), no
    # address (a first visit's ?token=) sent on to another site
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class Headers:
    """ASGI middleware: every response carries :data:`HEADERS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, sending if scope["type"] == "http" else send)


class TokenGate:
    """ASGI middleware: with a token, every request must present it (``X-Agentlog-Token``,
    ``Authorization: Bearer``, or the cookie); a GET with the right ``?token=`` sets the
    cookie and redirects to the same URL without it, so the token leaves the address bar."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request

        request = Request(scope)
        if self._presented(request):
            await self.app(scope, receive, send)
            return
        given = request.query_params.get("token")
        if request.method == "GET" and same(given, self.token):
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = URL(scope=scope).replace(query=urlencode(kept))
            redirect = RedirectResponse(f"{target.path}?{target.query}".rstrip("?"), 303)
            redirect.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
            await redirect(scope, receive, send)
            return
        refused = PlainTextResponse("401: this agentlog UI needs its access token\n", 401)
        await refused(scope, receive, send)

    def _presented(self, request: Request) -> bool:
        assert self.token is not None
        bearer = request.headers.get("authorization", "")
        return any(
            same(v, self.token)
            for v in (
                request.headers.get(TOKEN_HEADER),
                bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None,
                request.cookies.get(TOKEN_COOKIE),
            )
        )
