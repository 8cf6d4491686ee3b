"""The floors of scripts/bench_steps.py: raw commits with no engine, measured in its run.

Four kinds, each a ``Runner`` (steps -> seconds for that many commits):

- ``raw sqlite one-row commit``: one ~100 B row into a fresh agentlog file's events table
  (WAL, ``synchronous=FULL``: the file kind the engine writes), ``BEGIN``/``INSERT``/
  ``COMMIT`` with :mod:`sqlite3`, one fsync'd commit each.
- ``raw sqlite keyed-call rows``: what one keyed side-effecting call commits (its intent
  ``tool_invoked`` and the previous call's deferred ``tool_succeeded``, the run-index
  upsert and the lease-epoch check), the engine's own SQL and payload bytes, sqlite3 only.
- ``raw postgres one-row commit``: one autocommit ``INSERT`` of one row over psycopg.
- ``raw postgres keyed-call rows``: the same rows as one call of the store's append
  function (the engine's own statement), autocommit, psycopg only.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

Runner = Callable[[int], float]
PAYLOAD = b"x" * 100


def _keyed_rows(run_id: str) -> Callable[[int], tuple[list[tuple[str, bytes]], Any]]:
    """``(topic, payload)`` of a keyed call's two events and its index row, at step ``i``."""
    from engine import events as ev
    from engine.store import RunRow
    from engine.store.codec import encode_event

    def rows(i: int) -> tuple[list[tuple[str, bytes]], Any]:
        now = time.time()
        done = ev.ToolSucceeded(
            at=now, call=i, tool="bench_tool_keyed", result={"i": i, "v": 2 * i}, attempt=1
        )
        invoked = ev.ToolInvoked(
            at=now,
            call=i + 1,
            tool="bench_tool_keyed",
            args={"i": i + 1},
            args_hash="0" * 32,
            key=f"{run_id}:{i + 1}",
            side_effect=True,
        )
        row = RunRow(run_id, "bench", "running", now, now, None, 2 * i + 2)
        return [encode_event(done), encode_event(invoked)], row

    return rows


def _timed(commit: Callable[[int], None]) -> Runner:
    """A runner making ``steps`` commits, ``commit(n)`` the n-th (0-based) since it began."""
    done = [0]

    def go(steps: int) -> float:
        started = time.perf_counter()
        for n in range(done[0], done[0] + steps):
            commit(n)
        done[0] += steps
        return time.perf_counter() - started

    return go


def _sqlite_file(path: str) -> sqlite3.Connection:
    from engine.store.url import open_store

    open_store(f"sqlite:///{path}").close()  # the engine's schema, WAL, in a file of its own
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def sqlite_one_row(path: str) -> Runner:
    conn = _sqlite_file(path)
    stream = uuid.uuid4().hex

    def commit(n: int) -> None:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO agentlog_events VALUES (?,?,?,?)", (stream, n + 1, "t", PAYLOAD))
        conn.execute("COMMIT")

    return _timed(commit)


def sqlite_keyed_rows(path: str) -> Runner:
    from engine.store import sqlite as backend

    conn = _sqlite_file(path)
    run_id = uuid.uuid4().hex
    stream = uuid.uuid4().hex
    conn.execute(backend.TAKE_LEASE, (run_id, "bench", 1e12, 0.0, ""))
    rows = _keyed_rows(run_id)

    def commit(n: int) -> None:
        events, run = rows(n)
        conn.execute("BEGIN")
        for i, (topic, payload) in enumerate(events):
            conn.execute(
                "INSERT INTO agentlog_events VALUES (?,?,?,?)",
                (stream, 2 * n + i + 1, topic, payload),
            )
        conn.execute(backend.UPSERT_RUN, run.params())
        conn.execute(backend.NEWER_EPOCH, (run_id, 1)).fetchall()
        conn.execute("COMMIT")

    return _timed(commit)


def _pg(url: str) -> tuple[Any, Any]:
    """A raw autocommit connection in the engine's schema (created here) and its store."""
    import psycopg

    from engine.store.url import open_store

    store = open_store(url)
    store.max_global_position()  # first use creates the schema and tables
    conn = psycopg.connect(url.split("?")[0], autocommit=True)
    schema = url.split("schema=")[1] if "schema=" in url else "public"
    conn.execute(f'SET search_path TO "{schema}"')
    return conn, store


def postgres_one_row(url: str) -> Runner:
    conn, store = _pg(url)
    store.close()
    conn.execute("CREATE TABLE bench_raw (id bigserial PRIMARY KEY, s uuid, v bigint, state bytea)")
    stream = uuid.uuid4()

    def commit(n: int) -> None:
        conn.execute(
            "INSERT INTO bench_raw (s, v, state) VALUES (%s, %s, %s)",
            (stream, n + 1, PAYLOAD),
            prepare=True,
        )

    return _timed(commit)


def postgres_keyed_rows(url: str) -> Runner | None:
    """The append function the store calls, called raw (None if the store has none)."""
    conn, store = _pg(url)
    statement = getattr(store._events, "_append_call", None)
    run_id = uuid.uuid4().hex
    _, epoch = store.take_lease_fenced(run_id, "bench", time.time() + 1e6, time.time())
    store.close()
    if statement is None:
        return None
    stream = uuid.uuid4()
    rows = _keyed_rows(run_id)

    def commit(n: int) -> None:
        events, run = rows(n)
        params = (
            [stream, stream],
            [2 * n + 1, 2 * n + 2],
            [t for t, _ in events],
            [p for _, p in events],
            *([c] for c in run.params()),
            run_id,
            epoch,
        )
        conn.execute(statement, params, prepare=True).fetchall()

    return _timed(commit)


def raw_systems(stores: list[str], tmp: str, pg_url: str) -> dict[str, Runner | None]:
    """The raw rows of the table, per store measured."""
    systems: dict[str, Runner | None] = {}
    if "sqlite" in stores:
        systems["raw sqlite one-row commit"] = sqlite_one_row(f"{tmp}/raw1.db")
        systems["raw sqlite keyed-call rows"] = sqlite_keyed_rows(f"{tmp}/rawk.db")
    if "postgres" in stores:
        systems["raw postgres one-row commit"] = postgres_one_row(pg_url)
        systems["raw postgres keyed-call rows"] = postgres_keyed_rows(pg_url)
    return systems
