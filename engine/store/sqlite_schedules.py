"""``agentlog_schedules`` in the SQLite file: one statement per operation, each atomic
under the file's write lock."""

from __future__ import annotations

from typing import Any

from eventsourcing.sqlite import SQLiteRecorder

from .schedules import ADVANCE, COLUMNS, DDL, UPSERT, ScheduleRow, ScheduleStore, stored_row


class SQLiteSchedules(SQLiteRecorder, ScheduleStore):
    """Schedules in the ``agentlog_schedules`` table of the SQLite file."""

    table = "agentlog_schedules"

    def construct_create_table_statements(self) -> list[str]:
        return [DDL.format(table=self.table, blob="blob", real="real")]

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        with self.datastore.transaction(commit=True) as c:
            c.execute(sql, params)
            return len(c.fetchall())

    def upsert(self, row: ScheduleRow) -> None:
        marks = ",".join("?" * len(row.params()))
        self._write(UPSERT.format(table=self.table, columns=COLUMNS, marks=marks), row.params())

    def delete(self, name: str) -> bool:
        return self._write(f"DELETE FROM {self.table} WHERE name=? RETURNING name", (name,)) > 0

    def rows(self) -> list[ScheduleRow]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT {COLUMNS} FROM {self.table} ORDER BY name")
            return [stored_row(tuple(r)) for r in c.fetchall()]

    def advance(self, name: str, tick: float) -> bool:
        sql = ADVANCE.format(table=self.table, mark="?")
        return self._write(sql, (tick, name, tick)) > 0
