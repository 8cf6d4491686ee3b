"""Retention's rows: bytes per stream, the rows that point at a blob, and one run's rows
deleted in one transaction (events, snapshots, blobs, index, queue and view tracking),
on each backend. Which rows those are is decided above (:mod:`engine.store.prune`).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from .. import failpoints
from .ports import TABLES
from .viewsql import TRACKING

BLOB_TOPIC = "%@blob"  # a row whose payload is a BlobRef (moved out of line)


class RunRows(msgspec.Struct, frozen=True):
    """What one run's prune deletes: its event streams (its own, its inbox, the ledger
    keys that go with it), the blob streams nothing else points at, and what must still
    hold when the transaction starts (its status, and its stream's last position)."""

    run_id: str
    stream: uuid.UUID  # the run's own stream
    position: int  # its last position when planned: a run that moved since is left alone
    statuses: tuple[str, ...]
    streams: tuple[uuid.UUID, ...]
    blobs: tuple[uuid.UUID, ...] = ()
    # Ledger streams among ``streams`` with their last position when planned: a key
    # claimed again since then keeps its stream (and this run stays).
    keys: tuple[tuple[uuid.UUID, int], ...] = ()


class PruneRows(ABC):
    """A store's rows as retention sees them."""

    @abstractmethod
    def sizes(self, table: str) -> dict[uuid.UUID, int]:
        """Bytes stored per stream in ``table`` (one of ``TABLES``)."""

    @abstractmethod
    def pointers(self) -> list[tuple[str, uuid.UUID, int, str, bytes]]:
        """``(table, stream, position, topic, payload)`` of every event and snapshot row
        whose payload is a blob's address."""

    @abstractmethod
    def delete(self, rows: RunRows, now: float) -> bool:
        """Delete ``rows`` in one transaction, unless the run moved since it was planned
        (another status or position), a run whose parent it is is left (a fork made
        since: it reads its parent) or a live owner holds its lease: then nothing is
        written and False. The run's lease row stays, its epoch bumped: a stale owner's
        fenced append is refused."""


class _Changed(Exception):
    """The run moved since it was planned: the transaction rolls back."""


class _SQLRows(PruneRows):
    def __init__(self, datastore: Any, mark: str, qualify: Any, key: Any, size: str) -> None:
        self.datastore = datastore
        self.mark = mark
        self.qualify = qualify
        self.key = key  # a stream id as the backend stores it
        self.size = size  # the SQL of a row's bytes

    def _rows(self, c: Any) -> list[tuple[Any, ...]]:
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in c.fetchall()]

    def sizes(self, table: str) -> dict[uuid.UUID, int]:
        sql = f"SELECT originator_id, SUM({self.size}) FROM {self.qualify(table)} GROUP BY 1"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql)
            return {_uuid(s): int(n) for s, n in self._rows(c)}

    def pointers(self) -> list[tuple[str, uuid.UUID, int, str, bytes]]:
        found = []
        with self.datastore.transaction(commit=False) as c:
            for table in TABLES[:2]:
                c.execute(
                    "SELECT originator_id, originator_version, topic, state FROM "
                    f"{self.qualify(table)} WHERE topic LIKE {self.mark}",
                    (BLOB_TOPIC,),
                )
                found += [
                    (table, _uuid(s), int(p), str(t), bytes(d)) for s, p, t, d in self._rows(c)
                ]
        return found

    def delete(self, rows: RunRows, now: float) -> bool:
        try:
            with self.datastore.transaction(commit=True) as c:
                self._check(c, rows, now)
                self._delete(c, rows)
        except _Changed:
            return False
        return True

    def _check(self, c: Any, rows: RunRows, now: float) -> None:
        m, q = self.mark, self.qualify
        # A write first: SQLite takes its write lock here, PostgreSQL the row's lock, so
        # nothing appends a lifecycle event to the run before this transaction ends.
        c.execute(
            f"UPDATE {q('agentlog_runs')} SET run_id = run_id WHERE run_id = {m}", (rows.run_id,)
        )
        c.execute(f"SELECT status FROM {q('agentlog_runs')} WHERE run_id = {m}", (rows.run_id,))
        found = self._rows(c)
        if not found or str(found[0][0]) not in rows.statuses:
            raise _Changed
        # Its planned children went first (leaves first): one left is a fork or child
        # made since the plan (a rewind appends nothing to its parent), which reads it.
        c.execute(
            f"SELECT run_id FROM {q('agentlog_runs')} WHERE parent_run_id = {m} LIMIT 1",
            (rows.run_id,),
        )
        if self._rows(c):
            raise _Changed
        last = f"SELECT MAX(originator_version) FROM {q(TABLES[0])} WHERE originator_id = {m}"
        for stream, position in ((rows.stream, rows.position), *rows.keys):
            c.execute(last, (self.key(stream),))
            if int(self._rows(c)[0][0] or 0) != position:
                raise _Changed
        c.execute(
            f"SELECT owner, expires_at FROM {q('agentlog_leases')} WHERE run_id = {m}",
            (rows.run_id,),
        )
        lease = self._rows(c)
        if lease and lease[0][0] and float(lease[0][1]) >= now:
            raise _Changed  # a live owner executes it (a resume began meanwhile)
        c.execute(
            f"INSERT INTO {q('agentlog_leases')} (run_id, owner, expires_at, epoch) "
            f"VALUES ({m}, '', 0, 1) ON CONFLICT (run_id) DO UPDATE SET owner = '', "
            f"expires_at = 0, epoch = {q('agentlog_leases')}.epoch + 1",
            (rows.run_id,),
        )

    def _delete(self, c: Any, rows: RunRows) -> None:
        m, q = self.mark, self.qualify
        streams = [self.key(s) for s in rows.streams]
        for table, ids in ((TABLES[0], streams), (TABLES[1], streams)):
            for sid in ids:
                c.execute(f"DELETE FROM {q(table)} WHERE originator_id = {m}", (sid,))
            failpoints.hit("in_prune")  # killed here: the transaction never commits
        for sid in rows.blobs:
            c.execute(f"DELETE FROM {q(TABLES[2])} WHERE originator_id = {m}", (self.key(sid),))
        for table in ("agentlog_runs", "agentlog_queue"):
            c.execute(f"DELETE FROM {q(table)} WHERE run_id = {m}", (rows.run_id,))
        c.execute(f"DELETE FROM {q(TRACKING)}")  # every view rebuilds from the log left


class _SQLitePrune(_SQLRows):
    def __init__(self, datastore: SQLiteDatastore) -> None:
        size = "LENGTH(CAST(state AS BLOB)) + LENGTH(topic)"
        super().__init__(datastore, "?", lambda name: name, lambda s: s.hex, size)


class _PostgresPrune(_SQLRows):
    def __init__(self, datastore: PostgresDatastore) -> None:
        schema = '"' + datastore.schema.replace('"', '""') + '"'
        size = "pg_column_size(state) + pg_column_size(topic)"
        super().__init__(datastore, "%s", lambda name: f"{schema}.{name}", lambda s: s, size)


class _MemoryPrune(PruneRows):
    """The memory store's rows: a pruned row leaves its stream's index (reads and the
    global order skip it); its slot in the global order stays, so ids never shift."""

    def __init__(self, store: Any) -> None:
        self.recorders = dict(
            zip(TABLES, (store._events, store._snapshots, store._blobs), strict=True)
        )
        self.store = store

    def sizes(self, table: str) -> dict[uuid.UUID, int]:
        rec = self.recorders[table]
        found: dict[uuid.UUID, int] = {}
        with rec.changed:
            for stream, index in rec._stored_events_index.items():
                rows = [rec._stored_events[i] for i in index.values()]
                if rows:
                    found[_uuid(stream)] = sum(len(r.state) + len(r.topic) for r in rows)
        return found

    def pointers(self) -> list[tuple[str, uuid.UUID, int, str, bytes]]:
        found = []
        for table in TABLES[:2]:
            rec = self.recorders[table]
            with rec.changed:
                for stream, index in rec._stored_events_index.items():
                    for p, i in index.items():
                        r = rec._stored_events[i]
                        if r.topic.endswith(BLOB_TOPIC[1:]):
                            found.append((table, _uuid(stream), p, r.topic, r.state))
        return found

    def delete(self, rows: RunRows, now: float) -> bool:
        events = self.recorders[TABLES[0]]
        leases = self.store._leases
        with events.changed, leases.lock:
            row = events._runs.get(rows.run_id)
            if row is None or row.status not in rows.statuses:
                return False
            if any(r.parent_run_id == rows.run_id for r in events._runs.values()):
                return False  # a fork or child made since the plan reads it
            for stream, position in ((rows.stream, rows.position), *rows.keys):
                if (events._positions.get(str(stream)) or [0])[-1] != position:
                    return False
            owner, until, epoch = leases.held.get(rows.run_id, ("", 0.0, 0))
            if owner and until >= now:
                return False
            leases.held[rows.run_id] = ("", 0.0, epoch + 1)
            for table, ids in ((TABLES[0], rows.streams), (TABLES[1], rows.streams)):
                self._drop(table, ids)
            self._drop(TABLES[2], rows.blobs)
            events._runs.pop(rows.run_id, None)
        queues = self.store.queues._port
        with queues.lock:
            queues._rows.pop(rows.run_id, None)
        views = self.store.views.port
        with views.lock:
            views.tracked.clear()
        return True

    def _drop(self, table: str, streams: Sequence[uuid.UUID]) -> None:
        rec = self.recorders[table]
        with rec.changed:
            for s in streams:
                rec._stored_events_index.pop(str(s), None)
                rec._positions.pop(str(s), None)


def prune_rows(store: Any) -> PruneRows:
    """The retention rows of ``store``'s backend."""
    datastore = getattr(store._events, "datastore", None)
    if isinstance(datastore, SQLiteDatastore):
        return _SQLitePrune(datastore)
    if isinstance(datastore, PostgresDatastore):
        return _PostgresPrune(datastore)
    return _MemoryPrune(store)


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
