"""``--store-loss``: the store connection lost between an effect and its outcome.

A step the campaign arms (``campaign_store_loss:N`` among its failpoints) loses the
store the N-th time a tool returns in that process (the engine's ``after_tool`` point:
the tool's effect done, its outcome not yet written). On PostgreSQL the step's backends
are terminated for real (``pg_terminate_backend``, found by the ``application_name``
the step's store URL carries); on SQLite the outcome write of that thread fails once as
a lost disk would (``StoreError`` from the store's append: nothing written). The run
must stop (``OutcomeNotRecorded``: no agent code can catch it), stay resumable, and its
resume resolve the call as uncertain. The step says so on stderr (``MARK``): one that
then exits with an error (its own store I/O failed too, ``agentlog recover`` reporting
a stopped run) is counted as ended by the loss, not as an anomaly. Nothing is left
behind for later steps (no trigger, no flag in the store), so every step ends.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from typing import Any

POINT = "campaign_store_loss"
MARK = "campaign: store lost"  # on a step's stderr when its store loss happened
_state: dict[str, Any] = {"hits": 0, "fired": 0}
_doomed = threading.local()  # the thread whose next store append fails (SQLite)


def armed() -> int | None:
    """The n-th tool return that loses the store, when the step is armed."""
    for part in os.environ.get("AGENTLOG_FAILPOINTS", "").split(","):
        point, _, nth = part.strip().partition(":")
        if point == POINT:
            return int(nth) if nth.isdigit() else 1
    return None


def arm(url: str) -> str:
    """In a step's process: hook the store loss in when armed; the URL to open (on
    PostgreSQL, naming this process's backends)."""
    nth = armed()
    if nth is None:
        return url
    from engine import failpoints

    original = failpoints.hit
    app = f"campaign-loss-{uuid.uuid4().hex[:10]}"
    postgres = url.startswith("postgres")

    def hit(name: str) -> None:
        if name == "after_tool":
            _state["hits"] += 1
            if _state["hits"] == nth:
                _lose(url, app) if postgres else _doom()
        original(name)

    failpoints.hit = hit  # type: ignore[assignment]
    if postgres:
        sep = "&" if "?" in url else "?"
        return f"{url}{sep}application_name={app}"
    _patch_append()
    return url


def _lose(url: str, app: str) -> None:
    """Terminate every backend of this step (from a connection of its own)."""
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app,),
        ).fetchall()
    _state["fired"] += len(rows)
    print(f"{MARK} ({len(rows)} backends terminated)", file=sys.stderr, flush=True)


def _doom() -> None:
    _doomed.fail = True
    _state["fired"] += 1
    print(f"{MARK} (the next outcome write fails)", file=sys.stderr, flush=True)


def _patch_append() -> None:
    """The SQLite store's next append in a doomed thread fails, once, writing nothing."""
    from engine.errors import StoreError
    from engine.store.base import Store

    original = Store.append

    def append(self: Any, items: Any, runs: Any = (), **kwargs: Any) -> list[int]:
        if getattr(_doomed, "fail", False):
            _doomed.fail = False
            raise StoreError(f"{self.name}: disk I/O error (the campaign's store loss)")
        return original(self, items, runs, **kwargs)  # a lease's fence, and what comes

    Store.append = append  # type: ignore[method-assign]
