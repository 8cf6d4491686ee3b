"""Live pages: a server-sent event stream that says "changed" whenever what a page shows
moved on (a run's indexed position; the board's run index), looked at again each time
the store has news (:mod:`replay.ui.news`) and at least every ``POLL_S`` seconds."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from . import params
from .news import News

if TYPE_CHECKING:
    from starlette.requests import Request

    from engine import Engine

POLL_S = 5.0  # a look without news (news the store's notification missed)
LIFETIME_S = 300.0  # then the stream ends; EventSource reconnects on its own


def fingerprint(engine: Engine, run_id: str | None) -> str:
    """What changes when the page moves on: the run's last indexed position, or a digest
    of the whole run index (each run's id, status and position)."""
    if run_id is not None:
        return str(engine.store.indexed_position(engine.resolve(run_id)))
    digest = hashlib.blake2b(digest_size=12)
    for r in engine.store.runs():
        digest.update(f"{r.run_id}\0{r.status}\0{r.position}\n".encode())
    return digest.hexdigest()


def stream(request: Request) -> StreamingResponse:
    """``GET /live?run=ID&seen=FP``: an ``event: changed`` (its data the new fingerprint)
    each time the fingerprint differs from the last one sent (or from ``seen``);
    ``once=1`` ends the stream after the first; a stopping server ends it too."""
    engine: Engine = request.app.state.engine
    run_id = params.text(request.query_params.get("run"), "run")
    seen = request.query_params.get("seen", "")
    once = request.query_params.get("once") == "1"
    fingerprint(engine, run_id)  # an unknown run is a 404 now, not a broken stream

    news: News = request.app.state.news

    async def changes() -> AsyncIterator[str]:
        heard = await run_in_threadpool(news.wait, -1, 0)  # listening from here on
        last, ends = seen, time.monotonic() + LIFETIME_S
        yield ": agentlog live\n\n"
        while time.monotonic() < ends:
            now = await run_in_threadpool(fingerprint, engine, run_id)
            if now != last:
                last = now
                yield f"event: changed\ndata: {now}\n\n"
                if once:
                    return
            if await request.is_disconnected():
                return
            heard = await news.waited(heard, POLL_S)
            if news.stopped:  # the server stops: end the stream, the page reconnects later
                return

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(changes(), media_type="text/event-stream", headers=headers)
