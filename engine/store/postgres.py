"""The production store: PostgreSQL through psycopg 3 and a pool, on eventsourcing's recorders.

Appends run in parallel (no table lock); readers of the global order read only below a
horizon that a writers' barrier proves final, so a projection's cursor never skips an
event (:mod:`.postgres_append`). The run-index upsert rides in the append's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import OperationalError, StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresDatastore,
    PostgresRecorder,
)
from psycopg.conninfo import make_conninfo
from psycopg.sql import SQL, Composable, Identifier

from ..errors import StoreUnavailable
from .base import Store
from .opening import open_tables
from .ports import Fence, LeaseStore, RunRecorder, RunRow, lease_taken
from .postgres_append import FENCED, BurstNotifier, OrderedReads, function_statements
from .postgres_fork import ForkGuard
from .postgres_locks import PostgresLocks
from .postgres_queues import PostgresQueues
from .postgres_schedules import PostgresSchedules
from .postgres_schema import add_column, has_events_table, refuse_caching_sequence
from .postgres_views import PostgresViews

_RUN_COLUMNS = "run_id, agent, status, started_at, updated_at, parent_run_id, position, lineage"


class PostgresEventRecorder(OrderedReads, RunRecorder):
    """Events recorder whose inserts upsert the run index in the same transaction, without
    a table lock; its readers never see a global position out of commit order
    (:mod:`.postgres_append`)."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(datastore.schema)
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0}.agentlog_runs ("
                "run_id text PRIMARY KEY, agent text NOT NULL, status text NOT NULL, "
                "started_at double precision NOT NULL, updated_at double precision NOT NULL, "
                "parent_run_id text, position bigint NOT NULL DEFAULT 0, lineage text)"
            ).format(schema)
        )
        self.sql_create_statements.append(
            SQL(
                "CREATE INDEX IF NOT EXISTS agentlog_runs_started ON {0}.agentlog_runs (started_at)"
            ).format(schema)
        )
        self.sql_create_statements.append(
            SQL(
                "CREATE INDEX IF NOT EXISTS agentlog_runs_parent "
                "ON {0}.agentlog_runs (parent_run_id)"
            ).format(schema)
        )
        self._select_runs = SQL("SELECT " + _RUN_COLUMNS + " FROM {0}.agentlog_runs").format(schema)
        self._count_stream = SQL(
            "SELECT COUNT(*) AS n FROM {0}.{1} WHERE originator_id = %s"
        ).format(schema, Identifier(events_table_name))
        self._select_position = SQL(
            "SELECT position FROM {0}.agentlog_runs WHERE run_id = %s"
        ).format(schema)
        self.sql_create_statements.extend(function_statements(datastore, events_table_name))
        self.notifier = BurstNotifier(datastore, self.channel_name)
        self._append_call = SQL(
            "SELECT * FROM {0}.agentlog_append(%s::{1}[], %s::bigint[], %s::text[], "
            "%s::bytea[], %s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], "
            "%s::text[], %s::bigint[], %s::text[], %s::text, %s::bigint)"
        ).format(schema, Identifier(datastore.originator_id_type))

    def create_table(self) -> None:
        super().create_table()
        # An index an older agentlog made has no lineage: its roots get theirs here; a
        # row with a parent gets it from its run's next commit, and is read lazily until.
        table = SQL("{0}.agentlog_runs").format(Identifier(self.datastore.schema))
        fill = "UPDATE {0} SET lineage = 'root' WHERE lineage IS NULL AND parent_run_id IS NULL"
        add = SQL("ALTER TABLE {0} ADD COLUMN IF NOT EXISTS lineage text").format(table)
        add_column(self.datastore, "agentlog_runs", "lineage", add, SQL(fill).format(table))

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        runs: Sequence[RunRow] = (),
        fence: Fence | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        """One round trip: a server-side function takes the writers' barrier (shared),
        checks ``fence`` against the run's lease, upserts the run index and inserts, as
        one statement in one transaction; the notifier sends the followers' hint after.
        No retry: a lost reply would make a committed append look like a conflict."""
        if not stored_events and not runs:
            return []
        params = self.append_params(stored_events, runs, fence)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            try:
                curs.execute(self._append_call, params, prepare=True)
            except psycopg.Error as e:
                if fence is None or e.sqlstate != FENCED:
                    raise
                detail = e.diag.message_detail or ""
                raise lease_taken(fence, int(detail) if detail.isdigit() else None) from None
            ids = [row["agentlog_append"] for row in curs.fetchall()]
        self.notifier.poke()
        return ids

    def append_params(
        self, stored_events: Sequence[StoredEvent], runs: Sequence[RunRow], fence: Fence | None
    ) -> tuple[Any, ...]:
        """The parameters of ``append_call``, the call of ``agentlog_append``."""
        columns = list(zip(*(r.params() for r in runs), strict=True)) if runs else [()] * 8
        return (
            [s.originator_id for s in stored_events],
            [s.originator_version for s in stored_events],
            [s.topic for s in stored_events],
            [s.state for s in stored_events],
            *(list(c) for c in columns),
            None if fence is None else fence.run_id,
            None if fence is None else fence.epoch,
        )

    @property
    def append_call(self) -> Composable:
        return self._append_call

    def guard_forks(self, fresh_pool: Callable[[], Any]) -> None:
        """In a forked child, a new pool from ``fresh_pool`` and a new notifier."""
        self._fork_guard = ForkGuard(self.datastore, fresh_pool, self.notifier.after_fork)

    def release(self) -> None:
        """Stop the notifier's thread (after its last pending hint)."""
        guard = getattr(self, "_fork_guard", None)
        if guard is not None:
            guard.release()
        self.notifier.close()

    def stream_length(self, stream: UUID) -> int:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._count_stream, (stream,))
            row = curs.fetchone()
            return int(row["n"]) if row else 0

    def runs(self, status: str | None = None) -> list[RunRow]:
        sql = self._select_runs
        params: tuple[Any, ...] = ()
        if status is not None:
            sql += SQL(" WHERE status = %s")
            params = (status,)
        sql += SQL(" ORDER BY started_at DESC, run_id DESC")
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(sql, params)
            return [RunRow(**row) for row in curs.fetchall()]

    def runs_started(self, low: float, high: float) -> list[RunRow]:
        sql = self._select_runs + SQL(" WHERE started_at BETWEEN %s AND %s")
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(sql, (low, high))
            return [RunRow(**row) for row in curs.fetchall()]

    def indexed_position(self, run_id: str) -> int | None:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._select_position, (run_id,))
            row = curs.fetchone()
            return None if row is None else int(row["position"])

    def children(self, parent_run_id: str) -> list[RunRow]:
        order = ' ORDER BY started_at, run_id COLLATE "C"'
        sql = self._select_runs + SQL(" WHERE parent_run_id = %s" + order)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(sql, (parent_run_id,))
            return [RunRow(**row) for row in curs.fetchall()]

    def run_ids(self, prefix: str) -> list[str]:
        # starts_with compares the text itself: no LIKE wildcards or escapes to get wrong.
        # ORDER BY in the C collation sorts as SQLite and the memory store do.
        sql = SQL(
            "SELECT run_id FROM {0}.agentlog_runs WHERE starts_with(run_id, %s)"
            ' ORDER BY run_id COLLATE "C" LIMIT 10'
        ).format(Identifier(self.datastore.schema))
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(sql, (prefix,))
            return [row["run_id"] for row in curs.fetchall()]


class PostgresLeases(PostgresRecorder, LeaseStore):
    """Owner leases in the ``agentlog_leases`` table of the store's schema."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        super().__init__(datastore)
        table = SQL("{0}.agentlog_leases").format(Identifier(datastore.schema))
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0} (run_id text PRIMARY KEY, "
                "owner text NOT NULL, expires_at double precision NOT NULL, "
                "epoch bigint NOT NULL DEFAULT 0)"
            ).format(table)
        )
        self._add_epoch = SQL(
            "ALTER TABLE {0} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0"
        ).format(table)
        # The one lease upsert (taking, renewing, and a queue's claim): the epoch grows
        # when the lease passes to another owner (a dropped lease's owner is ''), never
        # on a renewal.
        self._take = SQL(
            "INSERT INTO {0} AS l (run_id, owner, expires_at, epoch) VALUES (%s,%s,%s,1) "
            "ON CONFLICT (run_id) DO UPDATE SET owner=excluded.owner, "
            "expires_at=excluded.expires_at, "
            "epoch=l.epoch + (CASE WHEN l.owner = excluded.owner THEN 0 ELSE 1 END) "
            "WHERE l.expires_at < %s OR l.owner = excluded.owner OR l.owner = %s"
        ).format(table)
        self.take_sql = self._take  # a queue's claim takes leases with it too
        self._owner = SQL("SELECT owner, epoch FROM {0} WHERE run_id = %s").format(table)
        # A dropped lease keeps its row (and epoch), owned by nobody: no epoch is reused.
        self._drop = SQL(
            "UPDATE {0} SET owner = '', expires_at = 0 WHERE run_id = %s AND owner = %s"
        ).format(table)
        self._select = SQL(
            "SELECT owner, expires_at FROM {0} WHERE run_id = %s AND owner <> ''"
        ).format(table)

    def create_table(self) -> None:
        super().create_table()
        add_column(self.datastore, "agentlog_leases", "epoch", self._add_epoch)

    def take_lease_fenced(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> tuple[str, int]:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._take, (run_id, owner, until, now, dead))
            curs.execute(self._owner, (run_id,))
            row = curs.fetchone()
            assert row is not None
            return str(row["owner"]), int(row["epoch"])

    def drop_lease(self, run_id: str, owner: str) -> None:
        try:
            self._drop_lease(run_id, owner)
        except OperationalError:
            # The server dropped its connections (a restart, a terminated backend): the
            # pool's idle ones are dead too. Replace them, then drop the lease once more,
            # so a run that stops on a lost connection is resumable by others at once.
            self.datastore.pool.check()
            self._drop_lease(run_id, owner)

    def _drop_lease(self, run_id: str, owner: str) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._drop, (run_id, owner))

    def lease(self, run_id: str) -> tuple[str, float] | None:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._select, (run_id,))
            row = curs.fetchone()
            return (row["owner"], row["expires_at"]) if row else None


def open_postgres(
    name: str,
    *,
    host: str,
    port: int,
    dbname: str,
    user: str,
    password: str,
    schema: str = "public",
    pool_size: int = 2,
    max_overflow: int = 8,
    create: bool = True,
    libpq: dict[str, str] | None = None,
    **options: Any,
) -> Store:
    """Open the PostgreSQL store, creating its schema and tables under an advisory lock.

    ``create=False`` creates nothing: a schema without agentlog's tables reads as empty.
    ``libpq`` holds connection parameters (sslmode, ...) given to every connection."""
    libpq = {"connect_timeout": "5", **(libpq or {})}
    server: dict[str, Any] = {
        "host": host,
        "port": port,
        "dbname": dbname,
        "user": user,
        "password": password,
    }
    try:
        # A direct probe gives precise errors (no such role/database, refused) and
        # serialises schema creation between processes opening the store at once.
        with psycopg.connect(make_conninfo(**server, **libpq), autocommit=True) as probe:
            if not create and not has_events_table(probe, schema):
                from .memory import open_memory

                return open_memory(name, read_only=True, **options)
            probe.execute("SELECT pg_advisory_lock(7245001)")
            try:
                probe.execute(SQL("CREATE SCHEMA IF NOT EXISTS {0}").format(Identifier(schema)))
                pool = {"pool_size": pool_size, "max_overflow": max_overflow}
                store = _open_schema(name, server, schema, pool, libpq, options)
                try:
                    refuse_caching_sequence(probe, name, schema)
                except BaseException:
                    store.close()
                    raise
                return store
            finally:
                probe.execute("SELECT pg_advisory_unlock(7245001)")
    except psycopg.Error as e:
        raise StoreUnavailable(f"{name}: {_reason(e, password)}") from e
    except StoreUnavailable:
        raise
    except Exception as e:  # eventsourcing's own PersistenceError while creating tables
        raise StoreUnavailable(f"{name}: {_reason(e, password)}") from e


def _open_schema(
    name: str,
    server: dict[str, Any],
    schema: str,
    pool: dict[str, Any],
    libpq: dict[str, str],
    options: dict[str, Any],
) -> Store:
    """The store in ``schema`` (which exists), on a new pool of connections to ``server``."""
    timeout = max(5.0, float(libpq["connect_timeout"]))

    def made() -> PostgresDatastore:  # its pool opens on first use: no connection yet
        made = PostgresDatastore(**server, schema=schema, connect_timeout=timeout, **pool)
        assert isinstance(made.pool.kwargs, dict)
        made.pool.kwargs.update(libpq)  # every connection it makes gets these too
        return made

    datastore = made()
    leases = PostgresLeases(datastore)
    store = open_tables(
        name,
        datastore,
        PostgresEventRecorder,
        PostgresAggregateRecorder,
        leases,
        PostgresViews,
        locks=PostgresLocks(datastore),
        queues=lambda d, held: PostgresQueues(d, held.take_sql),
        schedules=PostgresSchedules(datastore),
        **options,
    )
    events = store._events
    assert isinstance(events, PostgresEventRecorder)
    events.guard_forks(lambda: made().pool)  # a forked child's own connections
    return store


def _reason(e: BaseException, password: str) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # psycopg's connection errors end with the server's own FATAL line: the useful one.
    fatal = [ln for ln in lines if "FATAL" in ln or "refused" in ln or "timeout" in ln]
    text = fatal[-1] if fatal else lines[0] if lines else type(e).__name__
    if password:
        text = text.replace(password, "***")
    return text
