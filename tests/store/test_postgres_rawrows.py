"""Rewriting raw rows on PostgreSQL (engine/store/rawrows.py, the reseal's writer): a row the
rewrite inserts into the events table draws its global position under the writers' barrier,
so a reader racing the rewrite waits for it instead of proving a horizon above it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from projection_kit import step
from test_postgres_append import _in_thread, _recorder, _until, _waiting_on_a_lock, pg_store

from engine.store import Append, Store
from engine.store.codec import encode_event
from engine.store.rawrows import RawRow, raw_rows

pytestmark = pytest.mark.postgres
__all__ = ["pg_store"]  # the fixture, imported


class _Paused:
    """A datastore whose write transactions stop after their INSERT until released: a
    rewrite between drawing a position and its commit."""

    def __init__(self, datastore: Any) -> None:
        self._datastore = datastore
        self.inserted = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._datastore, name)

    @contextmanager
    def transaction(self, *, commit: bool = False) -> Iterator[Any]:
        with self._datastore.transaction(commit=commit) as c:
            yield _PausingCursor(c, self)


class _PausingCursor:
    def __init__(self, cursor: Any, paused: _Paused) -> None:
        self._cursor = cursor
        self._paused = paused

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def execute(self, sql: Any, params: Any = None) -> Any:
        done = self._cursor.execute(sql, params)
        if str(sql).startswith("INSERT"):
            self._paused.inserted.set()
            assert self._paused.release.wait(300), "the test never released the rewrite"
        return done


def test_a_reader_waits_for_an_event_row_a_rewrite_inserts(pg_store: Store) -> None:
    """The rewrite's fallback INSERT has drawn a position and not committed; an append
    after it commits. A reader then waits for the rewrite (without the barrier it returns
    the later position alone, and its cursor would pass the rewrite's row for good)."""
    first = pg_store.append([Append(uuid.uuid4(), 1, step(1))])
    raw = raw_rows(pg_store._events, pg_store._snapshots, pg_store._blobs, pg_store.views.port)
    paused = _Paused(raw.datastore)  # type: ignore[attr-defined]
    raw.datastore = paused  # type: ignore[attr-defined]
    topic, payload = encode_event(step(2))
    row = RawRow(uuid.uuid4(), 1, topic, payload)
    rewriter, _ = _in_thread(lambda: raw.rewrite([("events", row)], []))
    try:
        assert paused.inserted.wait(300), "the rewrite never inserted"
        second = pg_store.append([Append(uuid.uuid4(), 1, step(3))])
        reader, read = _in_thread(lambda: pg_store.read_all(after=0))
        _until(lambda: read or _waiting_on_a_lock(_recorder(pg_store), "agentlog_head"))
        assert not read, "a reader returned past a position the rewrite had not committed"
    finally:
        paused.release.set()
        rewriter.join(300)
    reader.join(300)
    positions = [r.global_position for r in read[0]]
    assert len(positions) == 3 and positions[0] == first[0] and positions[2] == second[0]
