"""Cross-agent locks on PostgreSQL: the ``agentlog_locks`` table of the store's schema,
one statement per operation (see :class:`~engine.store.ports.LockStore`)."""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresDatastore, PostgresRecorder
from psycopg.sql import SQL, Identifier

from .ports import LockRow, LockStore


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
