"""Hostile cases of SQLite group commit, on a real file with real threads: a Ctrl-C that
reaches the leader after its batch's COMMIT must not tell the other callers that nothing
of the batch was written."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_sqlite_group_commit import _event, _gathered, _group, path, store  # noqa: F401

from engine.store import Append, Store, sqlite_group, stream_id
from engine.store.sqlite_pool import Pool


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_interrupt_after_the_commit_tells_no_caller_it_was_not_written(
    store: Store,  # noqa: F811
    path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two appends share a batch; the leader's KeyboardInterrupt lands as it gives the
    batch's connection back, after the COMMIT. Both appends are durable: the follower
    gets its positions, not "none of them was written" (it would retry or give up on
    an append that is in the log)."""
    armed: list[threading.Thread] = []
    hit = sqlite_group.failpoints.hit

    def arm(name: str) -> None:
        if name == "in_group_commit":
            armed.append(threading.current_thread())
        hit(name)

    put = Pool.put_connection

    def interrupted(self: Pool, conn: Any) -> None:
        put(self, conn)
        if armed and armed[0] is threading.current_thread():
            armed.append(threading.current_thread())  # once
            if len(armed) == 2:
                raise KeyboardInterrupt

    monkeypatch.setattr(sqlite_group.failpoints, "hit", arm)
    monkeypatch.setattr(Pool, "put_connection", interrupted)
    calls = [
        lambda name=name: store.append([Append(stream_id(name), 1, _event(name))])
        for name in ("a", "b")
    ]
    out = _gathered(_group(store), path, calls)
    assert len(armed) >= 2, "the batch never committed"
    streams = {r.stream for r in store.read_all(limit=10)}
    assert streams == {stream_id("a"), stream_id("b")}, "both appends are in the log"
    told = [o for o in out if isinstance(o, Exception)]
    assert not told, f"a caller was told its committed append failed: {told}"
