"""Pages as HTML: the Jinja2 environment (autoescaped: every value from the log is text),
the CLI's styled pieces as spans, and the page and error responses."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.responses import HTMLResponse

from ..output import Piece
from .guard import csrf_of, with_csrf_cookie

if TYPE_CHECKING:
    from starlette.requests import Request

HERE = Path(__file__).parent
_STYLE_WORD = re.compile(r"[a-z]+")


def _json(value: Any) -> str:
    """A value as indented JSON text (times as ISO-8601), for a ``<pre>``."""

    def default(v: object) -> str:
        return v.isoformat() if isinstance(v, datetime) else repr(v)

    return json.dumps(value, indent=2, ensure_ascii=False, default=default, sort_keys=True)


def line(pieces: Sequence[Piece]) -> Markup:
    """One line of the CLI's pieces: plain text, or text in spans whose classes are the
    style's words (``"bold red"``); every text escaped."""
    out: list[str] = []
    for p in pieces:
        if isinstance(p, str):
            out.append(str(escape(p)))
            continue
        text, style = p
        classes = " ".join("s-" + w for w in _STYLE_WORD.findall(style))
        out.append(f'<span class="{classes}">{escape(text)}</span>' if classes else escape(text))
    return Markup("".join(out))


def lines(rows: Iterable[Sequence[Piece]]) -> list[Markup]:
    return [line(r) for r in rows]


ENV = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["tojson_text"] = _json


def page(request: Request, template: str, code: int = 200, **values: Any) -> HTMLResponse:
    """The page ``template`` with ``values``, the CSRF value its forms carry, and the
    access path (for links under a mount point)."""
    root = request.scope.get("root_path", "")
    html = ENV.get_template(template).render(
        request=request, csrf=csrf_of(request), root=root, **values
    )
    response = HTMLResponse(html, code)
    with_csrf_cookie(request, response)
    return response


def error(request: Request, status: int, message: str) -> HTMLResponse:
    """An error page: the one line the CLI would print, escaped, and the status."""
    return page(request, "error.html", status, status=status, message=message)
