"""``agentlog_schedules`` in the store's PostgreSQL schema: one statement per operation,
each atomic under the row's lock."""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresDatastore, PostgresRecorder
from psycopg.sql import SQL, Identifier

from .schedules import ADVANCE, COLUMNS, DDL, UPSERT, ScheduleRow, ScheduleStore, stored_row


class PostgresSchedules(PostgresRecorder, ScheduleStore):
    """Schedules in the ``agentlog_schedules`` table of the store's schema."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        super().__init__(datastore)
        table = SQL("{0}.agentlog_schedules").format(Identifier(datastore.schema))
        ddl = DDL.format(table="{0}", blob="bytea", real="double precision")
        self.sql_create_statements.append(SQL(ddl).format(table))
        marks = ",".join(["%s"] * len(COLUMNS.split(",")))
        upsert = UPSERT.format(table="{0}", columns=COLUMNS, marks=marks)
        self._upsert = SQL(upsert).format(table)
        self._delete = SQL("DELETE FROM {0} WHERE name = %s RETURNING name").format(table)
        self._rows = SQL("SELECT " + COLUMNS + ' FROM {0} ORDER BY name COLLATE "C"').format(table)
        advance = ADVANCE.format(table="{0}", mark="%s")
        self._advance = SQL(advance).format(table)

    def _write(self, sql: Any, params: tuple[Any, ...]) -> int:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(sql, params)
            return len(curs.fetchall()) if curs.description else 0

    def upsert(self, row: ScheduleRow) -> None:
        self._write(self._upsert, row.params())

    def delete(self, name: str) -> bool:
        return self._write(self._delete, (name,)) > 0

    def rows(self) -> list[ScheduleRow]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._rows)
            return [stored_row(tuple(r.values())) for r in curs.fetchall()]

    def advance(self, name: str, tick: float) -> bool:
        return self._write(self._advance, (tick, name, tick)) > 0
