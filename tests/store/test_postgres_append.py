"""PostgreSQL appends without a global lock: two appends run at once, a reader waits for
the one still open below its horizon (never returns a later position first), the
followers' NOTIFY comes from a notifier thread that stops on close, and a follower wakes
without a hint too."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from conftest import PG_URL
from eventsourcing.persistence import StoredEvent
from projection_kit import step
from psycopg.sql import SQL, Identifier

from engine.polling import poll_until
from engine.store import Append, Store, open_store
from engine.store.codec import encode_event
from engine.store.postgres import PostgresEventRecorder

pytestmark = pytest.mark.postgres
PATIENCE = 300.0  # seconds: generous, for a busy machine; never a speed assertion


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = open_store(pg_url)
    yield s
    s.close()


def _recorder(store: Store) -> PostgresEventRecorder:
    recorder = store._events
    assert isinstance(recorder, PostgresEventRecorder)
    return recorder


def _until(condition: Callable[[], Any]) -> None:
    assert poll_until(condition, PATIENCE, first=0.01, most=0.05), "condition not met in time"


class _Held:
    """An append whose transaction stays open (its ids drawn, not committed) until
    :meth:`commit`: what a writer between its INSERT and its commit looks like."""

    def __init__(self, store: Store, stream: uuid.UUID) -> None:
        recorder = _recorder(store)
        topic, payload = encode_event(step(1))
        params = recorder.append_params([StoredEvent(stream, 1, topic, payload)], (), None)
        self.conn = psycopg.connect(_conninfo(recorder))
        self.conn.execute("BEGIN")
        row = self.conn.execute(recorder.append_call, params).fetchone()
        assert row is not None
        self.id = int(row[0])

    def commit(self) -> None:
        self.conn.commit()
        self.conn.close()


def _conninfo(recorder: PostgresEventRecorder) -> str:
    """The test database's address (the store's schema is named in every statement)."""
    return PG_URL.split("?")[0]


def _waiting_on_a_lock(recorder: PostgresEventRecorder, like: str) -> bool:
    """A backend of this database whose query contains ``like`` waits for a lock."""
    with psycopg.connect(_conninfo(recorder), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND strpos(query, %s) > 0 AND pid <> pg_backend_pid()",
            (like,),
        ).fetchone()
    return row is not None and row[0] > 0


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


def test_two_appends_run_at_once_and_a_reader_waits_for_the_open_one(pg_store: Store) -> None:
    """One writer's transaction is open after drawing its id; another writer's append
    completes meanwhile (with a table lock it would wait for the first). A reader of the
    global order then waits for the open one instead of returning the later position
    alone, and sees both, in order, once it commits."""
    recorder = _recorder(pg_store)
    first, second = uuid.uuid4(), uuid.uuid4()
    held = _Held(pg_store, first)
    try:
        writer, ids = _in_thread(lambda: pg_store.append([Append(second, 1, step(2))]))
        _until(lambda: ids or _waiting_on_a_lock(recorder, "agentlog_append"))
        assert ids, "the second append waits for the first's transaction"
        assert ids[0][0] > held.id
        reader, read = _in_thread(lambda: pg_store.read_all(after=0))
        head, top = _in_thread(pg_store.max_global_position)
        _until(lambda: read or _waiting_on_a_lock(recorder, "agentlog_head"))
        assert not read and not top, "a reader returned a position above an open append"
    finally:
        held.commit()
    for t in (writer, reader, head):
        t.join(PATIENCE)
    assert [r.global_position for r in read[0]] == [held.id, ids[0][0]]
    assert top == [ids[0][0]]


def test_a_reader_after_the_writers_needs_no_barrier(pg_store: Store) -> None:
    """Once a read proved a horizon, reads at or below it are one plain query: the
    barrier runs once for a batch of appends, not once per read."""
    stream = uuid.uuid4()
    pg_store.append([Append(stream, p, step(p)) for p in (1, 2, 3)])
    calls: list[int] = []
    recorder = _recorder(pg_store)
    barrier = recorder._barrier
    recorder._barrier = lambda: calls.append(1) or barrier()  # type: ignore[method-assign]
    top = pg_store.max_global_position()
    assert [r.position for r in pg_store.read_all(after=0)] == [1, 2, 3]
    assert pg_store.max_global_position() == top
    assert [r.position for r in pg_store.read_all(after=top - 1)] == [3]
    assert calls == [1]


def test_the_notifier_sends_the_hint_after_a_commit_and_stops_on_close(pg_url: str) -> None:
    store = open_store(pg_url)
    recorder = _recorder(store)
    with psycopg.connect(_conninfo(recorder), autocommit=True) as listener:
        listener.execute(SQL("LISTEN {0}").format(Identifier(recorder.channel_name)))
        store.append([Append(uuid.uuid4(), 1, step(1))])
        assert recorder.notifier.running
        heard = list(listener.notifies(timeout=PATIENCE, stop_after=1))
        assert [n.channel for n in heard] == [recorder.channel_name]
    thread = recorder.notifier._thread
    store.close()
    assert thread is not None and not thread.is_alive()
    assert not recorder.notifier.running


def test_a_follower_wakes_on_the_hint_and_without_it(pg_store: Store) -> None:
    """wait_for_events (ten minutes at most) returns once this process appends; with the
    notifier silenced it still returns: a follower re-checks, the hint is only a hint."""
    recorder = _recorder(pg_store)
    for silenced in (False, True):
        if silenced:
            recorder.notifier.poke = lambda: None  # type: ignore[method-assign]
        head = pg_store.max_global_position()
        waiter, woke = _in_thread(lambda h=head: pg_store.views.wait_for_events(h, 600))
        _until(lambda: _listening(recorder))
        pg_store.append([Append(uuid.uuid4(), 1, step(1))])
        waiter.join(PATIENCE)
        assert woke == [True]


def _listening(recorder: PostgresEventRecorder) -> bool:
    with psycopg.connect(_conninfo(recorder), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND strpos(query, 'LISTEN') > 0 AND pid <> pg_backend_pid()"
        ).fetchone()
    return row is not None and row[0] > 0


def test_an_append_of_the_old_function_in_flight_holds_readers_back(pg_store: Store) -> None:
    """During an upgrade a transaction of the old ``agentlog_append`` body (the EXCLUSIVE
    table lock, no barrier) may still be open: a reader waits for it too (its ROW SHARE
    lock conflicts with exactly that mode), so it never returns past its position."""
    recorder = _recorder(pg_store)
    first = pg_store.append([Append(uuid.uuid4(), 1, step(1))])
    table = SQL("{0}.agentlog_events").format(Identifier(recorder.datastore.schema))
    topic, payload = encode_event(step(2))
    old = psycopg.connect(_conninfo(recorder))
    try:
        old.execute(SQL("LOCK TABLE {0} IN EXCLUSIVE MODE").format(table))
        row = old.execute(
            SQL(
                "INSERT INTO {0} (originator_id, originator_version, topic, state) "
                "VALUES (%s, 1, %s, %s) RETURNING notification_id"
            ).format(table),
            (uuid.uuid4(), topic, payload),
        ).fetchone()
        assert row is not None
        reader, read = _in_thread(lambda: pg_store.read_all(after=0))
        _until(lambda: read or _waiting_on_a_lock(recorder, "agentlog_head"))
        assert not read, "a reader returned while an old-body append was open"
    finally:
        old.commit()
        old.close()
    reader.join(PATIENCE)
    assert [r.global_position for r in read[0]] == [first[0], row[0]]
