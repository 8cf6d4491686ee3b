"""The embedded store: one SQLite file in WAL mode on eventsourcing's SQLite recorders.

``synchronous=FULL`` by default (durable across power loss); ``?synchronous=NORMAL``
trades that for speed and stays durable across process crashes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteDatastore,
    SQLiteRecorder,
)

from ..errors import StoreUnavailable
from .base import Store
from .opening import open_tables
from .ports import Fence, LeaseStore, LockRow, LockStore, RunRecorder, RunRow, lease_taken
from .sqlite_group import GroupCommit
from .sqlite_pool import LOCK_WAIT, Pool
from .sqlite_queues import SQLiteQueues
from .sqlite_schedules import SQLiteSchedules
from .sqlite_views import SQLiteViews

RUNS_DDL = (
    "CREATE TABLE IF NOT EXISTS agentlog_runs ("
    "run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, status TEXT NOT NULL, "
    "started_at REAL NOT NULL, updated_at REAL NOT NULL, parent_run_id TEXT, "
    "position INTEGER NOT NULL DEFAULT 0, lineage TEXT)",
    "CREATE INDEX IF NOT EXISTS agentlog_runs_started ON agentlog_runs (started_at)",
    "CREATE INDEX IF NOT EXISTS agentlog_runs_parent ON agentlog_runs (parent_run_id)",
)
LEASES_DDL = (
    "CREATE TABLE IF NOT EXISTS agentlog_leases ("
    "run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL, "
    "epoch INTEGER NOT NULL DEFAULT 0)"
)
# The one lease upsert (taking, renewing, and a queue's claim): the epoch grows when the
# lease passes to another owner (a dropped lease's owner is ''), never on a renewal.
TAKE_LEASE = (
    "INSERT INTO agentlog_leases (run_id, owner, expires_at, epoch) VALUES (?,?,?,1) "
    "ON CONFLICT (run_id) DO UPDATE SET owner=excluded.owner, "
    "expires_at=excluded.expires_at, epoch=agentlog_leases.epoch + "
    "(CASE WHEN agentlog_leases.owner = excluded.owner THEN 0 ELSE 1 END) "
    "WHERE agentlog_leases.expires_at < ? "
    "OR agentlog_leases.owner = excluded.owner OR agentlog_leases.owner = ?"
)
# A dropped lease keeps its row (and epoch), owned by nobody: an epoch is never reused.
DROP_LEASE = "UPDATE agentlog_leases SET owner='', expires_at=0 WHERE run_id=? AND owner=?"
# The fenced append's check, in the append's transaction after its writes.
NEWER_EPOCH = "SELECT epoch FROM agentlog_leases WHERE run_id=? AND epoch>?"
RUN_COLUMNS = "run_id, agent, status, started_at, updated_at, parent_run_id, position, lineage"
UPSERT_RUN = (
    f"INSERT INTO agentlog_runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?) "
    "ON CONFLICT (run_id) DO UPDATE SET agent=excluded.agent, status=excluded.status, "
    "updated_at=excluded.updated_at, position=excluded.position, "
    "lineage=coalesce(excluded.lineage, agentlog_runs.lineage)"
)
SELECT_RUNS = f"SELECT {RUN_COLUMNS} FROM agentlog_runs"
# An index an older agentlog made has no lineage: its roots get theirs here; a row with a
# parent (a child or a fork) gets it from its run's next commit, and is read lazily until.
ADD_LINEAGE = "ALTER TABLE agentlog_runs ADD COLUMN lineage TEXT"
ROOT_LINEAGE = (
    "UPDATE agentlog_runs SET lineage='root' WHERE lineage IS NULL AND parent_run_id IS NULL"
)
LOCKS_DDL = (
    "CREATE TABLE IF NOT EXISTS agentlog_locks (name TEXT PRIMARY KEY, holder TEXT, "
    "fence INTEGER NOT NULL, expires_at REAL NOT NULL, acquired_at REAL NOT NULL)"
)
# One statement each: the write lock is taken at the statement, and the WHERE decides.
ACQUIRE_LOCK = (
    "INSERT INTO agentlog_locks VALUES (?,?,1,?,?) ON CONFLICT (name) DO UPDATE SET "
    "holder=excluded.holder, fence=agentlog_locks.fence+1, expires_at=excluded.expires_at, "
    "acquired_at=excluded.acquired_at WHERE agentlog_locks.holder IS NULL "
    "OR agentlog_locks.holder=excluded.holder OR agentlog_locks.expires_at < ? RETURNING fence"
)
KEEP_LOCK = (
    "UPDATE agentlog_locks SET holder=?, expires_at=? WHERE name=? AND fence=? "
    "AND (holder IS NULL OR holder=?) RETURNING fence"
)
SYNC_MODES = ("FULL", "NORMAL", "EXTRA", "OFF")


class SQLiteEventRecorder(SQLiteApplicationRecorder, RunRecorder):
    """Events recorder whose inserts upsert the run index in the same transaction; the
    appends of this store object's threads commit together (``sqlite_group``)."""

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.group = GroupCommit(datastore)

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *RUNS_DDL]

    def create_table(self) -> None:
        super().create_table()
        with self.datastore.transaction(commit=False) as c:
            if _has_column(c, "agentlog_runs", "lineage"):
                return
        # An index an older agentlog made. A write first: the transaction takes the write
        # lock before it looks again, so two processes opening it at once add it once.
        with self.datastore.transaction(commit=True) as c:
            c.execute("UPDATE agentlog_runs SET run_id = run_id WHERE run_id = ''")
            if not _has_column(c, "agentlog_runs", "lineage"):
                c.execute(ADD_LINEAGE)
                c.execute(ROOT_LINEAGE)

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        runs: Sequence[RunRow] = (),
        fence: Fence | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        rows = []
        for s in stored_events:
            stream = s.originator_id
            stream = stream.hex if isinstance(stream, UUID) else stream
            rows.append((stream, s.originator_version, s.topic, s.state))
        params = [r.params() for r in runs]
        sql = self.insert_events_statement

        def work(c: sqlite3.Cursor) -> list[int | None]:
            ids = []
            try:
                for row in rows:
                    c.execute(sql, row)
                    ids.append(c.lastrowid)
                for p in params:
                    c.execute(UPSERT_RUN, p)
            except sqlite3.IntegrityError:  # a stale owner's conflict is named as such
                _check_fence(c, fence)
                raise
            _check_fence(c, fence)  # under the write lock, in this append's savepoint
            return ids

        return self.group.run(work)  # type: ignore[no-any-return]

    def stream_length(self, stream: UUID) -> int:
        sql = f"SELECT COUNT(*) FROM {self.events_table_name} WHERE originator_id=?"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, (stream.hex,))
            return int(c.fetchone()[0])

    def runs(self, status: str | None = None) -> list[RunRow]:
        sql = SELECT_RUNS
        params: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status=?"
            params = (status,)
        sql += " ORDER BY started_at DESC, run_id DESC"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, params)
            return [RunRow(*tuple(row)) for row in c.fetchall()]

    def runs_started(self, low: float, high: float) -> list[RunRow]:
        sql = SELECT_RUNS + " WHERE started_at BETWEEN ? AND ?"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, (low, high))
            return [RunRow(*tuple(row)) for row in c.fetchall()]

    def indexed_position(self, run_id: str) -> int | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute("SELECT position FROM agentlog_runs WHERE run_id=?", (run_id,))
            row = c.fetchone()
            return None if row is None else int(row[0])

    def children(self, parent_run_id: str) -> list[RunRow]:
        sql = SELECT_RUNS + " WHERE parent_run_id=? ORDER BY started_at, run_id"
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, (parent_run_id,))
            return [RunRow(*tuple(row)) for row in c.fetchall()]

    def run_ids(self, prefix: str) -> list[str]:
        # GLOB, not LIKE: LIKE ignores ASCII case, and ids are case-sensitive everywhere else.
        # Its metacharacters are matched literally inside brackets.
        pattern = "".join(f"[{ch}]" if ch in "*?[" else ch for ch in prefix) + "*"
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT run_id FROM agentlog_runs WHERE run_id GLOB ? ORDER BY run_id LIMIT 10",
                (pattern,),
            )
            return [row[0] for row in c.fetchall()]


class SQLiteLeases(SQLiteRecorder, LeaseStore):
    """Owner leases in the ``agentlog_leases`` table."""

    def construct_create_table_statements(self) -> list[str]:
        return [LEASES_DDL]

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(LEASES_DDL)
            if _has_epoch(c):
                return
        # A table made by an older agentlog. A write first: the transaction takes the write
        # lock (waiting its turn) before it looks again, so two processes opening the
        # store at once add the column once.
        with self.datastore.transaction(commit=True) as c:
            c.execute("UPDATE agentlog_leases SET run_id = run_id WHERE run_id = ''")
            if not _has_epoch(c):
                c.execute("ALTER TABLE agentlog_leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0")

    def take_lease_fenced(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> tuple[str, int]:
        with self.datastore.transaction(commit=True) as c:
            c.execute(TAKE_LEASE, (run_id, owner, until, now, dead))
            c.execute("SELECT owner, epoch FROM agentlog_leases WHERE run_id=?", (run_id,))
            row = c.fetchone()
            return str(row[0]), int(row[1])

    def drop_lease(self, run_id: str, owner: str) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(DROP_LEASE, (run_id, owner))

    def lease(self, run_id: str) -> tuple[str, float] | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT owner, expires_at FROM agentlog_leases WHERE run_id=? AND owner<>''",
                (run_id,),
            )
            row = c.fetchone()
            return (row[0], row[1]) if row else None


def _check_fence(c: Any, fence: Fence | None) -> None:
    """Raise ``LeaseTaken`` if the run of ``fence`` is leased at a newer epoch. Called after the
    transaction's first write: SQLite's write lock is held by then, so no lease changes
    hands before the commit."""
    if fence is not None:
        c.execute(NEWER_EPOCH, (fence.run_id, fence.epoch))
        newer = c.fetchone()
        if newer is not None:
            raise lease_taken(fence, int(newer[0]))


def _has_epoch(c: Any) -> bool:
    return _has_column(c, "agentlog_leases", "epoch")


def _has_column(c: Any, table: str, column: str) -> bool:
    c.execute(f"PRAGMA table_info({table})")
    return column in {str(r[1]) for r in c.fetchall()}


class SQLiteLocks(SQLiteRecorder, LockStore):
    """Cross-agent locks in the ``agentlog_locks`` table."""

    def construct_create_table_statements(self) -> list[str]:
        return [LOCKS_DDL]

    def _write(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        with self.datastore.transaction(commit=True) as c:
            c.execute(sql, params)
            return [row[0] for row in c.fetchall()]

    def acquire(
        self, name: str, holder: str, until: float, now: float, keep_fence: int = 0
    ) -> int | None:
        if keep_fence:
            rows = self._write(KEEP_LOCK, (holder, until, name, keep_fence, holder))
        else:
            rows = self._write(ACQUIRE_LOCK, (name, holder, until, now, now))
        return int(rows[0]) if rows else None

    def renew(self, name: str, holder: str, fence: int, until: float) -> bool:
        sql = "UPDATE agentlog_locks SET expires_at=? WHERE name=? AND holder=? AND fence=? "
        return bool(self._write(sql + "RETURNING fence", (until, name, holder, fence)))

    def release(self, name: str, holder: str, fence: int) -> bool:
        sql = "UPDATE agentlog_locks SET holder=NULL WHERE name=? AND holder=? AND fence=? "
        return bool(self._write(sql + "RETURNING fence", (name, holder, fence)))

    def release_all(self, holder: str) -> list[str]:
        sql = "UPDATE agentlog_locks SET holder=NULL WHERE holder=? RETURNING name"
        return sorted(self._write(sql, (holder,)))

    def held(self, now: float) -> list[LockRow]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                "SELECT name, holder, fence, expires_at FROM agentlog_locks "
                "WHERE holder IS NOT NULL AND expires_at >= ? ORDER BY name",
                (now,),
            )
            return [LockRow(*tuple(row)) for row in c.fetchall()]


def open_sqlite(
    name: str, path: str, synchronous: str = "FULL", *, create: bool = True, **options: Any
) -> Store:
    """Open the SQLite store at ``path``, creating it if needed when ``create``; one clear
    error if it can't. A database of other tables is never converted into a store."""
    sync = synchronous.upper()
    if sync not in SYNC_MODES:
        raise StoreUnavailable(f"{name}: synchronous must be one of {', '.join(SYNC_MODES)}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise StoreUnavailable(f"{name}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise StoreUnavailable(f"{name}: {path} is a directory, not a database file")
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would hang the open
        raise StoreUnavailable(f"{name}: {path} is not a regular file, not a database file")
    if not os.path.exists(path):
        if not create:
            raise StoreUnavailable(f"no store at {path} (only run, demo and import create one)")
    elif not _holds_agentlog_tables(name, path) and not create:
        from .memory import open_memory

        return open_memory(name, read_only=True, **options)  # an empty database
    datastore = SQLiteDatastore(db_name=path)
    datastore.pool = Pool(db_name=path, synchronous=sync)
    try:
        return open_tables(
            name,
            datastore,
            SQLiteEventRecorder,
            SQLiteAggregateRecorder,
            SQLiteLeases(datastore),
            SQLiteViews,
            locks=SQLiteLocks(datastore),
            queues=lambda d, _: SQLiteQueues(d, TAKE_LEASE),
            schedules=SQLiteSchedules(datastore),
            **options,
        )
    except Exception as e:  # eventsourcing wraps sqlite3 errors in its own types
        cause = e.__cause__ if isinstance(e.__cause__, sqlite3.Error) else e
        raise StoreUnavailable(f"{name}: cannot open the SQLite database: {cause}") from e


def _holds_agentlog_tables(name: str, path: str) -> bool:
    """Whether the existing database at ``path`` is an agentlog store (False: it has no
    tables at all). Read-only, so a mistyped path to someone else's file changes nothing;
    a database of other tables is refused."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=LOCK_WAIT)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.Error as e:
        raise StoreUnavailable(f"{name}: cannot open the SQLite database: {e}") from e
    tables = sorted(str(r[0]) for r in rows)
    if any(t.startswith("agentlog_") for t in tables):
        return True
    if tables:
        shown = ", ".join(tables[:3]) + (", ..." if len(tables) > 3 else "")
        raise StoreUnavailable(
            f"{name}: {path} is not an agentlog store: it holds other tables ({shown})"
        )
    return False
