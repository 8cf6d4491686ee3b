"""Hostile cases of the lock-free PostgreSQL appends: a horizon proven by another thread
between a read and its cheap-path check must not vouch for that read."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest
from conftest import drop_schema
from eventsourcing.postgres import PostgresApplicationRecorder
from projection_kit import step
from psycopg.sql import SQL, Identifier
from test_postgres_append import (  # noqa: F401
    PATIENCE,
    _conninfo,
    _Held,
    _in_thread,
    _recorder,
    _until,
    _waiting_on_a_lock,
    pg_store,
)

from engine.errors import StoreUnavailable
from engine.store import Append, Store, open_store

pytestmark = pytest.mark.postgres


def test_a_horizon_proven_after_a_read_does_not_vouch_for_it(
    pg_store: Store,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader's plain query misses an append still open below a committed one; before
    it compares with the proven horizon, another thread's barrier (after that append
    committed) raises the horizon past both. The read was taken before that horizon was
    proven: it must not be returned as final (it would skip the open append's position)."""
    recorder = _recorder(pg_store)
    held = _Held(pg_store, uuid.uuid4())
    later = pg_store.append([Append(uuid.uuid4(), 1, step(2))])[0]
    plain = PostgresApplicationRecorder.select_notifications
    raced: list[int] = []

    def racing(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = plain(self, *args, **kwargs)
        if not raced:  # between this read and its check: a commit, another's barrier
            raced.append(1)
            held.commit()
            recorder._barrier()
        return found

    monkeypatch.setattr(PostgresApplicationRecorder, "select_notifications", racing)
    ids = [n.id for n in recorder.select_notifications(held.id, 10)]
    assert ids == [held.id, later]


def _seq(recorder: Any) -> Any:
    return SQL("{0}.agentlog_events_notification_id_seq").format(
        Identifier(recorder.datastore.schema)
    )


def test_a_sequence_that_caches_ids_per_session_is_refused(pg_url: str) -> None:
    """With CACHE > 1 each writer session draws ids from its own block: a session's next
    append gets an id below one another session committed earlier, and a reader whose
    horizon is the sequence's last value has already passed it (a skipped position).
    The barrier cannot order such ids, so an opener refuses the store, naming the fix."""
    store = open_store(pg_url)
    recorder = _recorder(store)
    with psycopg.connect(_conninfo(recorder), autocommit=True) as admin:
        admin.execute(SQL("ALTER SEQUENCE {0} CACHE 10").format(_seq(recorder)))
    store.close()
    with pytest.raises(StoreUnavailable, match="CACHE 1"):
        open_store(pg_url).close()


_HOLDER = """
import sys, uuid, psycopg
from eventsourcing.persistence import StoredEvent
from engine.store import open_store
from engine.store.codec import encode_event
from engine import events as ev
store = open_store(sys.argv[1])
recorder = store._events
topic, payload = encode_event(ev.Checkpoint(at=1.0, call=1, name="held"))
params = recorder.append_params([StoredEvent(uuid.uuid4(), 1, topic, payload)], (), None)
conn = psycopg.connect(sys.argv[2])
conn.execute("BEGIN")
print(conn.execute(recorder.append_call, params).fetchone()[0], flush=True)
sys.stdin.read()  # held open until SIGKILLed
"""


def test_a_writer_sigkilled_mid_transaction_leaves_a_gap_not_a_stuck_reader(
    pg_url: str,
) -> None:
    """A writer process draws its id (the barrier's shared side held) and is SIGKILLed
    before its commit: a reader waiting on the barrier returns once the server ends that
    backend, with the later append only (the killed one's id is a gap, never read later)."""
    store = open_store(pg_url)
    try:
        recorder = _recorder(store)
        child = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, pg_url, _conninfo(recorder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        held = int(child.stdout.readline())
        later = store.append([Append(uuid.uuid4(), 1, step(2))])[0]
        assert later > held
        reader, read = _in_thread(lambda: store.read_all(after=0))
        _until(lambda: read or _waiting_on_a_lock(recorder, "agentlog_head"))
        assert not read, "a reader returned past a writer still in flight"
        child.send_signal(signal.SIGKILL)
        child.wait()
        reader.join(PATIENCE)
        assert [r.global_position for r in read[0]] == [later]
        again = store.append([Append(uuid.uuid4(), 1, step(3))])[0]
        assert [r.global_position for r in store.read_all(after=0)] == [later, again]
    finally:
        store.close()


def test_a_writer_in_flight_in_one_schema_holds_no_reader_of_another_back(
    pg_url: str,
) -> None:
    """Advisory locks are per database: each schema's barrier has its own key, so an
    append open in one schema's store does not stall the barrier of another's."""
    second_url = pg_url.replace("schema=", "schema=other_")
    try:
        _read_beside_a_held_append(open_store(pg_url), open_store(second_url))
    finally:
        drop_schema(second_url.rsplit("schema=", 1)[1])


def _read_beside_a_held_append(first: Store, second: Store) -> None:
    held = _Held(first, uuid.uuid4())
    mine = second.append([Append(uuid.uuid4(), 1, step(1))])[0]
    reader, read = _in_thread(lambda: second.read_all(after=0))
    try:
        _until(lambda: read or _waiting_on_a_lock(_recorder(second), "agentlog_head"))
        assert read, "a reader waited for another schema's writer"
        assert [r.global_position for r in read[0]] == [mine]
        assert second.max_global_position() == mine
    finally:
        held.commit()
        reader.join(PATIENCE)
        second.close()
        first.close()
