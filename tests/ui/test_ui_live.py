"""The live stream's cost: a page left open waits for news in the event loop, not in a
worker thread, so open pages never starve the pages and actions (sync handlers share
the worker threads, 40 by default)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from starlette.concurrency import run_in_threadpool

from engine import Engine
from replay.ui import app, live


def test_an_open_live_stream_holds_no_worker_thread_while_it_waits(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a single worker thread, a page is still served while a stream stays open."""
    monkeypatch.setattr(live, "POLL_S", 60.0)  # a stream waiting for news waits long
    web = app(eng)
    seen = live.fingerprint(eng, None)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/live",
        "raw_path": b"/live",
        "root_path": "",
        "query_string": f"seen={seen}".encode(),
        "headers": [(b"host", b"127.0.0.1")],
        "scheme": "http",
        "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
        "http_version": "1.1",
    }

    async def main() -> bool:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        opened, gone = anyio.Event(), anyio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and b"agentlog live" in message.get(
                "body", b""
            ):
                opened.set()

        served = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(web, scope, receive, send)
            await opened.wait()
            with anyio.move_on_after(10):  # the page's turn at the one worker thread
                for _ in range(5):  # the stream between two waits (its fingerprint) too
                    await run_in_threadpool(live.fingerprint, eng, None)
                served = True
            web.state.news.stop()
            gone.set()
        return served

    assert anyio.run(main), "a page waited for a worker thread an open stream held"
