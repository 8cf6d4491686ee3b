"""Rows as they are stored, for the one job that must see and rewrite them whole:
resealing a store (:mod:`engine.store.reseal`). Each backend scans a table in key order
and rewrites rows of several tables in one transaction; nothing here decodes a row.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, NamedTuple

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from .ports import TABLES, ViewStore
from .postgres_append import barrier_key

Key = tuple[uuid.UUID, int]  # (stream, position)


class RawRow(NamedTuple):
    """A row as stored: its stream, position, topic and bytes."""

    stream: uuid.UUID
    position: int
    topic: str
    state: bytes


TABLE = dict(zip(("events", "snapshots", "blobs"), TABLES, strict=True))


class RawRows(ABC):
    """A store's events, snapshots and blobs tables, row by row."""

    @abstractmethod
    def scan(self, table: str, after: Key | None, limit: int) -> list[RawRow]:
        """Up to ``limit`` rows of ``table`` (events, snapshots, blobs) after ``after``,
        in (stream, position) order."""

    @abstractmethod
    def rewrite(
        self, puts: Sequence[tuple[str, RawRow]], deletes: Sequence[tuple[str, Key]]
    ) -> None:
        """In one transaction: each put replaces (or inserts) its row, each delete removes
        one."""

    @abstractmethod
    def drop_views(self) -> None:
        """Drop every view's table and tracking row (the next reader rebuilds them)."""

    def compact(self) -> None:  # noqa: B027 (most backends keep no old bytes)
        """Leave no copy of a rewritten row's old bytes in the database's files."""


class _SQLRows(RawRows):
    def __init__(self, datastore: Any, mark: str, qualify: Any, key: Any) -> None:
        self.datastore = datastore
        self.mark = mark
        self.qualify = qualify
        self.key = key  # a stream id as the backend stores it

    def scan(self, table: str, after: Key | None, limit: int) -> list[RawRow]:
        m = self.mark
        columns = "originator_id, originator_version, topic, state"
        sql = f"SELECT {columns} FROM {self.qualify(TABLE[table])}"
        params: list[Any] = []
        if after is not None:
            sql += f" WHERE (originator_id, originator_version) > ({m}, {m})"
            params = [self.key(after[0]), after[1]]
        sql += f" ORDER BY originator_id, originator_version LIMIT {m}"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, [*params, limit])
            rows = [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in c.fetchall()]
        return [RawRow(_uuid(s), int(p), str(t), bytes(d)) for s, p, t, d in rows]

    def rewrite(
        self, puts: Sequence[tuple[str, RawRow]], deletes: Sequence[tuple[str, Key]]
    ) -> None:
        m = self.mark
        with self.datastore.transaction(commit=True) as c:
            if any(table == "events" for table, _ in puts):
                self._before_event_puts(c)
            for table, (stream, position) in deletes:
                c.execute(
                    f"DELETE FROM {self.qualify(TABLE[table])} WHERE originator_id = {m} "
                    f"AND originator_version = {m}",
                    (self.key(stream), position),
                )
            for table, s in puts:
                name = self.qualify(TABLE[table])
                c.execute(
                    f"UPDATE {name} SET topic = {m}, state = {m} WHERE originator_id = {m} "
                    f"AND originator_version = {m}",
                    (s.topic, s.state, self.key(s.stream), s.position),
                )
                if getattr(c, "sqlite_cursor", c).rowcount == 0:  # eventsourcing wraps sqlite3
                    c.execute(
                        f"INSERT INTO {name} (originator_id, originator_version, topic, state) "
                        f"VALUES ({m}, {m}, {m}, {m})",
                        (self.key(s.stream), s.position, s.topic, s.state),
                    )

    def _before_event_puts(self, c: Any) -> None:
        """First in a transaction that may insert an events row (and draw its global
        position): what the backend's appends take first too."""

    def drop_views(self) -> None:
        with self.datastore.transaction(commit=True) as c:
            for name in self._view_tables(c):
                c.execute(f"DROP TABLE IF EXISTS {self.qualify(name)}")
            c.execute(f"DELETE FROM {self.qualify('agentlog_tracking')}")

    def _view_tables(self, c: Any) -> list[str]:
        raise NotImplementedError


class _SQLiteRows(_SQLRows):
    def __init__(self, datastore: SQLiteDatastore) -> None:
        super().__init__(datastore, "?", lambda name: name, lambda s: s.hex)

    def _view_tables(self, c: Any) -> list[str]:
        c.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name GLOB 'agentlog_view_*'"
        )
        return [str(r[0]) for r in c.fetchall()]

    def compact(self) -> None:
        # Rewritten and dropped rows leave their old bytes in free pages and the WAL.
        path = self.datastore.pool.db_name
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class _PostgresRows(_SQLRows):
    def __init__(self, datastore: PostgresDatastore) -> None:
        schema = '"' + datastore.schema.replace('"', '""') + '"'
        super().__init__(datastore, "%s", lambda name: f"{schema}.{name}", lambda s: s)

    def _before_event_puts(self, c: Any) -> None:
        # The writers' barrier, shared, as agentlog_append takes it: a row the fallback
        # INSERT adds draws its position under it, so no reader proves a horizon above
        # a position still uncommitted (engine.store.postgres_append).
        key = barrier_key(self.datastore.schema, TABLE["events"])
        c.execute("SELECT pg_advisory_xact_lock_shared(%s)", (key,))

    def _view_tables(self, c: Any) -> list[str]:
        c.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s "
            "AND tablename LIKE 'agentlog\\_view\\_%%'",
            (self.datastore.schema,),
        )
        return [str(r["tablename"]) for r in c.fetchall()]


class _MemoryRows(RawRows):
    def __init__(self, recorders: dict[str, Any], views: ViewStore) -> None:
        self.recorders = recorders
        self.views = views

    def _recorder(self, table: str) -> Any:
        return self.recorders[table]

    def scan(self, table: str, after: Key | None, limit: int) -> list[RawRow]:
        rec = self._recorder(table)
        with rec.changed:
            keys = sorted(
                (uuid.UUID(stream), p) for stream, ps in rec._positions.items() for p in ps
            )
            chosen = [k for k in keys if after is None or k > after][:limit]
            found = [rec._stored_events[rec._stored_events_index[str(s)][p]] for s, p in chosen]
        return [RawRow(s, p, r.topic, r.state) for (s, p), r in zip(chosen, found, strict=True)]

    def rewrite(
        self, puts: Sequence[tuple[str, RawRow]], deletes: Sequence[tuple[str, Key]]
    ) -> None:
        for table, (stream, position) in deletes:
            rec = self._recorder(table)
            with rec.changed:
                rec._stored_events_index[str(stream)].pop(position, None)
                rec._positions[str(stream)].remove(position)
        for table, s in puts:
            rec = self._recorder(table)
            with rec.changed:
                row = StoredEvent(s.stream, s.position, s.topic, s.state)
                index = rec._stored_events_index[str(s.stream)]
                if s.position in index:
                    rec._stored_events[index[s.position]] = row
                else:
                    rec._insert([row])

    def drop_views(self) -> None:
        port: Any = self.views
        with port.lock:
            port.tables.clear()
            port.tracked.clear()


def raw_rows(events: Any, snapshots: Any, blobs: Any, views: ViewStore) -> RawRows:
    """The raw rows of the backend these recorders (a store's) belong to."""
    datastore = getattr(events, "datastore", None)
    if isinstance(datastore, SQLiteDatastore):
        return _SQLiteRows(datastore)
    if isinstance(datastore, PostgresDatastore):
        return _PostgresRows(datastore)
    return _MemoryRows({"events": events, "snapshots": snapshots, "blobs": blobs}, views)


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
