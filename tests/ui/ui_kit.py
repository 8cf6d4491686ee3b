"""Shared helpers for the web UI's tests (no tests here): a TestClient on ``app(engine)``
and the CSRF value its cookie holds after a first page."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from engine import Engine
from replay.ui import app


def client(engine: Engine, **options: Any) -> TestClient:
    return TestClient(app(engine, **options))


def csrf(c: TestClient, root: str = "") -> str:
    """The CSRF value the browser holds (a first page, under ``root``, sets it)."""
    if c.cookies.get("agentlog_csrf") is None:
        c.get(f"{root}/")
    value = c.cookies.get("agentlog_csrf")
    assert value is not None
    return value


def main_text(html: str) -> str:
    """The page's ``<main>``, for messages (the nav and script are the same everywhere)."""
    return html[html.find("<main>") : html.find("</main>")]
