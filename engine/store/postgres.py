"""The production store: PostgreSQL through psycopg 3 and a pool, on eventsourcing's recorders.

eventsourcing's insert path takes a table lock so global positions are assigned in
commit order (a projection's cursor never skips an event). We keep that lock and add
the run-index upsert to the same pipelined transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import OperationalError, StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresRecorder,
)
from psycopg.conninfo import make_conninfo
from psycopg.sql import SQL, Identifier

from ..errors import StoreUnavailable
from .base import Store
from .opening import open_tables
from .ports import LeaseStore, LockRow, LockStore, RunRecorder, RunRow
from .postgres_queues import PostgresQueues
from .postgres_schedules import PostgresSchedules
from .postgres_views import PostgresViews

_RUN_COLUMNS = "run_id, agent, status, started_at, updated_at, parent_run_id, position"

# Keeps eventsourcing's ordering guarantee (the EXCLUSIVE table lock before the insert
# draws notification ids) in a single statement, so an append is one round trip.
_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.agentlog_append(
    ids {idtype}[], versions bigint[], topics text[], states bytea[],
    run_ids text[], agents text[], statuses text[], started float8[], updated float8[],
    parents text[], positions bigint[]
) RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
BEGIN
    LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE;
    INSERT INTO {schema}.agentlog_runs AS r
        (run_id, agent, status, started_at, updated_at, parent_run_id, position)
        SELECT * FROM unnest(run_ids, agents, statuses, started, updated, parents, positions)
        ON CONFLICT (run_id) DO UPDATE SET agent = excluded.agent, status = excluded.status,
            updated_at = excluded.updated_at, position = excluded.position;
    PERFORM pg_notify({channel}, '');
    RETURN QUERY INSERT INTO {schema}.{table}
        (originator_id, originator_version, topic, state)
        SELECT * FROM unnest(ids, versions, topics, states)
        RETURNING notification_id;
END
$fn$
"""


class PostgresEventRecorder(PostgresApplicationRecorder, RunRecorder):
    """Events recorder whose inserts upsert the run index in the same transaction."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(datastore.schema)
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0}.agentlog_runs ("
                "run_id text PRIMARY KEY, agent text NOT NULL, status text NOT NULL, "
                "started_at double precision NOT NULL, updated_at double precision NOT NULL, "
                "parent_run_id text, position bigint NOT NULL DEFAULT 0)"
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
        self.sql_create_statements.append(
            SQL(_APPEND_FUNCTION).format(
                schema=schema,
                table=Identifier(events_table_name),
                idtype=Identifier(datastore.originator_id_type),
                channel=self.channel_name,
            )
        )
        self._append_call = SQL(
            "SELECT * FROM {0}.agentlog_append(%s::{1}[], %s::bigint[], %s::text[], "
            "%s::bytea[], %s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], "
            "%s::text[], %s::bigint[])"
        ).format(schema, Identifier(datastore.originator_id_type))

    def insert_events(
        self, stored_events: Sequence[StoredEvent], *, runs: Sequence[RunRow] = (), **kwargs: Any
    ) -> Sequence[int] | None:
        """One round trip: a server-side function takes eventsourcing's table lock (so
        global positions follow commit order), upserts the run index, notifies and
        inserts, as one statement in one transaction. No retry: a lost reply would make
        a committed append look like a conflict."""
        if not stored_events and not runs:
            return []
        columns = list(zip(*(r.params() for r in runs), strict=True)) if runs else [()] * 7
        params = (
            [s.originator_id for s in stored_events],
            [s.originator_version for s in stored_events],
            [s.topic for s in stored_events],
            [s.state for s in stored_events],
            *(list(c) for c in columns),
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._append_call, params, prepare=True)
            return [row["agentlog_append"] for row in curs.fetchall()]

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
                "owner text NOT NULL, expires_at double precision NOT NULL)"
            ).format(table)
        )
        self._take = SQL(
            "INSERT INTO {0} AS l VALUES (%s,%s,%s) ON CONFLICT (run_id) "
            "DO UPDATE SET owner=excluded.owner, expires_at=excluded.expires_at "
            "WHERE l.expires_at < %s OR l.owner = excluded.owner OR l.owner = %s"
        ).format(table)
        self.take_sql = self._take  # a queue's claim takes leases with it too
        self._owner = SQL("SELECT owner FROM {0} WHERE run_id = %s").format(table)
        self._drop = SQL("DELETE FROM {0} WHERE run_id = %s AND owner = %s").format(table)
        self._select = SQL("SELECT owner, expires_at FROM {0} WHERE run_id = %s").format(table)

    def take_lease(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> str:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._take, (run_id, owner, until, now, dead))
            curs.execute(self._owner, (run_id,))
            row = curs.fetchone()
            assert row is not None
            return str(row["owner"])

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


class PostgresLocks(PostgresRecorder, LockStore):
    """Cross-agent locks in the ``agentlog_locks`` table of the store's schema; each
    operation is one statement (the row's lock makes it atomic)."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        super().__init__(datastore)
        table = SQL("{0}.agentlog_locks").format(Identifier(datastore.schema))
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0} (name text PRIMARY KEY, holder text, "
                "fence bigint NOT NULL, expires_at double precision NOT NULL, "
                "acquired_at double precision NOT NULL)"
            ).format(table)
        )
        self._acquire = SQL(
            "INSERT INTO {0} AS l VALUES (%s,%s,1,%s,%s) ON CONFLICT (name) DO UPDATE SET "
            "holder=excluded.holder, fence=l.fence+1, expires_at=excluded.expires_at, "
            "acquired_at=excluded.acquired_at WHERE l.holder IS NULL "
            "OR l.holder=excluded.holder OR l.expires_at < %s RETURNING fence"
        ).format(table)
        self._keep = SQL(
            "UPDATE {0} SET holder=%s, expires_at=%s WHERE name=%s AND fence=%s "
            "AND (holder IS NULL OR holder=%s) RETURNING fence"
        ).format(table)
        self._renew = SQL(
            "UPDATE {0} SET expires_at=%s WHERE name=%s AND holder=%s AND fence=%s RETURNING fence"
        ).format(table)
        self._release = SQL(
            "UPDATE {0} SET holder=NULL WHERE name=%s AND holder=%s AND fence=%s RETURNING fence"
        ).format(table)
        self._release_all = SQL(
            "UPDATE {0} SET holder=NULL WHERE holder=%s RETURNING name AS fence"
        ).format(table)
        self._held = SQL(
            "SELECT name, holder, fence, expires_at FROM {0} "
            'WHERE holder IS NOT NULL AND expires_at >= %s ORDER BY name COLLATE "C"'
        ).format(table)

    def _write(self, sql: SQL | Any, params: tuple[Any, ...]) -> list[Any]:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(sql, params)
            return [row["fence"] for row in curs.fetchall()]

    def acquire(
        self, name: str, holder: str, until: float, now: float, keep_fence: int = 0
    ) -> int | None:
        if keep_fence:
            rows = self._write(self._keep, (holder, until, name, keep_fence, holder))
        else:
            rows = self._write(self._acquire, (name, holder, until, now, now))
        return int(rows[0]) if rows else None

    def renew(self, name: str, holder: str, fence: int, until: float) -> bool:
        return bool(self._write(self._renew, (until, name, holder, fence)))

    def release(self, name: str, holder: str, fence: int) -> bool:
        return bool(self._write(self._release, (name, holder, fence)))

    def release_all(self, holder: str) -> list[str]:
        return sorted(self._write(self._release_all, (holder,)))

    def held(self, now: float) -> list[LockRow]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._held, (now,))
            return [LockRow(**row) for row in curs.fetchall()]


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
            if not create and not _has_events_table(probe, schema):
                from .memory import open_memory

                return open_memory(name, read_only=True, **options)
            probe.execute("SELECT pg_advisory_lock(7245001)")
            try:
                probe.execute(SQL("CREATE SCHEMA IF NOT EXISTS {0}").format(Identifier(schema)))
                pool = {"pool_size": pool_size, "max_overflow": max_overflow}
                return _open_schema(name, server, schema, pool, libpq, options)
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
    datastore = PostgresDatastore(**server, schema=schema, connect_timeout=timeout, **pool)
    # The pool opens on first use: every connection it makes gets these too.
    assert isinstance(datastore.pool.kwargs, dict)
    datastore.pool.kwargs.update(libpq)
    leases = PostgresLeases(datastore)
    return open_tables(
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


def _has_events_table(conn: psycopg.Connection[Any], schema: str) -> bool:
    row = conn.execute(
        "SELECT to_regclass(format('%%I.%%I', %s::text, 'agentlog_events'))", (schema,)
    ).fetchone()
    return row is not None and row[0] is not None


def _reason(e: BaseException, password: str) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # psycopg's connection errors end with the server's own FATAL line: the useful one.
    fatal = [ln for ln in lines if "FATAL" in ln or "refused" in ln or "timeout" in ln]
    text = fatal[-1] if fatal else lines[0] if lines else type(e).__name__
    if password:
        text = text.replace(password, "***")
    return text
