"""Global order under concurrency: a tailing reader never misses an event (SQLite, PostgreSQL).

Writers in several threads, each with its own store handle (as separate workers would
have), append to their own streams while a reader tails ``read_all(after=cursor)``. On
PostgreSQL a writer that holds its transaction open after drawing its global position
shows deterministically that a later position never commits ahead of it.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import psycopg
import pytest
from conftest import backends, schema_of

from engine import events as ev
from engine.errors import ConcurrencyError
from engine.store import Append, Store, open_store
from engine.store.codec import encode_event

WRITERS = 4
COMMITS = 30  # per writer; every third commit carries a second stream too


def _step(i: int) -> ev.StepStarted:
    return ev.StepStarted(at=1_760_000_000.0 + i, call=i, name=f"s{i}")


def _writer(url: str, n: int, start: threading.Barrier, out: list[tuple[uuid.UUID, int]]) -> None:
    store = open_store(url)
    try:
        main, side = uuid.uuid4(), uuid.uuid4()
        start.wait()
        for i in range(1, COMMITS + 1):
            batch = [Append(main, i, _step(i))]
            if i % 3 == 0:
                batch.append(Append(side, i // 3, _step(i)))
            store.append(batch)
            out.extend((a.stream, a.position) for a in batch)
            if i % 7 == n:
                time.sleep(0.001)
    finally:
        store.close()


@backends("sqlite", "postgres")
def test_tailing_reader_sees_every_event_once_in_increasing_order(store_url: str) -> None:
    """While writers commit concurrently, a reader tailing read_all misses and repeats nothing."""
    setup = open_store(store_url)  # creates the tables once, before the race
    reader = open_store(store_url)
    written: list[list[tuple[uuid.UUID, int]]] = [[] for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS + 1)
    threads = [
        threading.Thread(target=_writer, args=(store_url, n, start, written[n]))
        for n in range(WRITERS)
    ]
    for t in threads:
        t.start()
    seen: list[tuple[uuid.UUID, int]] = []
    globals_seen: list[int] = []
    cursor = 0
    start.wait()
    try:
        while True:
            done = not any(t.is_alive() for t in threads)
            page = reader.read_all(after=cursor, limit=7)
            for r in page:
                assert r.global_position is not None
                globals_seen.append(r.global_position)
                seen.append((r.stream, r.position))
            if page:
                cursor = page[-1].global_position or cursor
            elif done:
                break
    finally:
        for t in threads:
            t.join()
        reader.close()
        setup.close()
    expected = [x for w in written for x in w]
    assert len(expected) == WRITERS * (COMMITS + COMMITS // 3)
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == set(expected)
    assert all(a < b for a, b in itertools.pairwise(globals_seen))
    # Each stream's events are seen in position order.
    by_stream: dict[uuid.UUID, list[int]] = {}
    for stream, pos in seen:
        by_stream.setdefault(stream, []).append(pos)
    assert all(p == list(range(1, len(p) + 1)) for p in by_stream.values())


def _racer(
    store: Store, stream: uuid.UUID, me: int, wins: dict[int, int], doubles: list[int]
) -> None:
    while True:
        pos = store.last_position(stream) + 1
        if pos > 40:
            return
        event = ev.StepStarted(at=1_760_000_000.0, call=pos, name=f"writer-{me}")
        try:
            store.append([Append(stream, pos, event)])
        except ConcurrencyError:
            continue
        if pos in wins:
            doubles.append(pos)  # two appends at one position both reported success
        wins.setdefault(pos, me)


@backends("memory", "sqlite", "postgres")
def test_racing_writers_on_one_stream_never_both_win_a_position(store_url: str) -> None:
    """Writers racing for the same positions: each is won once, and the winner's event is kept."""
    if store_url == "memory://":
        stores = [open_store(store_url)] * 3  # one in-process log shared by three writers
    else:
        stores = [open_store(store_url) for _ in range(3)]
    stream = uuid.uuid4()
    wins: dict[int, int] = {}
    doubles: list[int] = []
    threads = [
        threading.Thread(target=_racer, args=(s, stream, i, wins, doubles))
        for i, s in enumerate(stores)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert doubles == []
        assert sorted(wins) == list(range(1, 41))
        got = stores[0].read(stream)
        assert [r.position for r in got] == list(range(1, 41))
        assert [r.event.name for r in got] == [f"writer-{wins[p]}" for p in range(1, 41)]
        # Rolled-back conflicts may leave gaps in global positions (PostgreSQL sequences),
        # never disorder or duplicates.
        globals_ = [r.global_position or 0 for r in stores[0].read_all()]
        assert len(globals_) == 40
        assert all(a < b for a, b in itertools.pairwise(globals_))
        assert stores[0].max_global_position() == globals_[-1]
    finally:
        for s in set(stores):
            s.close()


@backends("sqlite", "postgres")
def test_concurrent_first_opens_of_one_url_all_succeed(store_url: str) -> None:
    """Six workers opening a brand-new store at once all get a working, shared store."""
    start = threading.Barrier(6)
    stores: list[Store] = []
    errors: list[BaseException] = []

    def open_and_append() -> None:
        start.wait()
        try:
            store = open_store(store_url)
            stores.append(store)
            store.append([Append(uuid.uuid4(), 1, _step(1))])
        except BaseException as e:  # reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=open_and_append) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(stores) == 6
        assert all(s.max_global_position() == 6 for s in stores)
    finally:
        for s in stores:
            s.close()


# The store's own server-side append, called on a connection the test controls.
_APPEND = (
    'SELECT * FROM "{schema}".agentlog_append(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[],'
    " %s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], %s::text[], %s::bigint[],"
    " %s::text[], %s::text, %s::bigint)"  # no fence
)
_WAITING = (  # a lock on the events table, or an advisory one (the writers' barrier)
    "SELECT count(*) FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation"
    " LEFT JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT l.granted"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND (l.locktype = 'advisory' OR (n.nspname = %s AND c.relname = 'agentlog_events'))"
)


@pytest.mark.postgres
def test_a_later_append_never_commits_ahead_of_an_open_earlier_one(pg_url: str) -> None:
    """A writer draws its global position through the append function and keeps its
    transaction open; another writer's append commits meanwhile (no table lock), yet a
    reader returns no later position while the earlier one is uncommitted (it waits on
    the writers' barrier), and after the commit it gets both, in order. Deterministic: the
    test waits until the second writer has committed or queued on a lock, and the reader
    has returned or queued on one, never on a clock."""
    store, reader = open_store(pg_url), open_store(pg_url)
    schema, base = schema_of(pg_url), pg_url.split("?")[0]
    held_stream, later_stream = uuid.uuid4(), uuid.uuid4()
    topic, payload = encode_event(_step(1))
    later: dict[str, list[int]] = {}
    writer = threading.Thread(
        target=lambda: later.update(ids=store.append([Append(later_stream, 1, _step(2))]))
    )
    try:
        with psycopg.connect(base) as held, psycopg.connect(base, autocommit=True) as watch:
            row = held.execute(
                _APPEND.format(schema=schema),
                (
                    [held_stream],
                    [1],
                    [topic],
                    [payload],
                    [],
                    [],
                    [],
                    [],
                    [],
                    [],
                    [],
                    [],
                    None,
                    None,
                ),
            ).fetchone()
            assert row is not None
            writer.start()
            while writer.is_alive() and not watch.execute(_WAITING, (schema,)).fetchone()[0]:
                writer.join(0.01)  # committed already (no lock), or queued behind ours
            during: list[tuple[uuid.UUID, int | None]] = []
            reading = threading.Thread(
                target=lambda: during.extend(
                    (r.stream, r.global_position) for r in reader.read_all()
                )
            )
            reading.start()
            while reading.is_alive() and not watch.execute(_WAITING, (schema,)).fetchone()[0]:
                reading.join(0.01)  # returned (the bug), or queued on the writers' barrier
            early = list(during)
            held.commit()
            reading.join()
        writer.join()
        assert early == [], "a later position became visible before an earlier commit"
        seen = [(r.stream, r.global_position) for r in reader.read_all(after=0)]
        assert seen == [(held_stream, row[0]), (later_stream, later["ids"][0])]
        assert row[0] < later["ids"][0]
    finally:
        writer.join()
        store.close()
        reader.close()
