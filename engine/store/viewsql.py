"""The SQL of views' tables, shared by SQLite and PostgreSQL: names are checked against
``[a-z][a-z0-9_]*`` before they reach a statement, and every value is a parameter."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from .ports import Applied, ColumnValue, Tracking, ViewBatch, ViewQuery, ViewRow, ViewTable

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
KINDS = {"text": "TEXT", "int": "BIGINT", "real": "DOUBLE PRECISION"}
TRACKING = "agentlog_tracking"


def check_name(name: str, what: str = "view") -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(f"{what} name {name!r} is not [a-z][a-z0-9_]* (at most 40)")
    return name


def table_name(table: ViewTable) -> str:
    return "agentlog_view_" + check_name(table.name)


def columns(table: ViewTable) -> list[str]:
    """The table's column names, checked; statements quote them, so a reserved word
    (``window``, ``order``) is a column name like any other."""
    return [check_name(c.name, "column") for c in table.columns]


class ViewSQL:
    """Statements for one backend: ``qualify`` names a table in its schema, ``mark`` is
    the parameter placeholder and ``blob`` the bytes type; ``if_missing`` is what makes an
    added column idempotent where the backend has it (PostgreSQL's ``IF NOT EXISTS``)."""

    def __init__(
        self, qualify: Callable[[str], str], mark: str, blob: str, if_missing: str = ""
    ) -> None:
        self.qualify = qualify
        self.mark = mark
        self.blob = blob
        self.if_missing = if_missing

    def create_tracking(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualify(TRACKING)} (name TEXT PRIMARY KEY, "
            "position BIGINT NOT NULL, version TEXT NOT NULL, "
            "last_stream TEXT, last_position BIGINT)"
        )

    def add_applied(self) -> list[str]:
        """The columns a tracking table made before they were kept gains (old rows read
        them as NULL, and their next commit fills them)."""
        table = self.qualify(TRACKING)
        return [
            f"ALTER TABLE {table} ADD COLUMN {self.if_missing}last_stream TEXT",
            f"ALTER TABLE {table} ADD COLUMN {self.if_missing}last_position BIGINT",
        ]

    def select_tracking(self) -> str:
        return (
            f"SELECT position, version, last_stream, last_position FROM {self.qualify(TRACKING)} "
            f"WHERE name = {self.mark}"
        )

    def put_tracking(self) -> str:
        m = self.mark
        return (
            f"INSERT INTO {self.qualify(TRACKING)} (name, position, version) VALUES ({m},{m},{m}) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position, "
            "version = excluded.version, last_stream = NULL, last_position = NULL"
        )

    def touch_tracking(self) -> str:
        """A write that changes nothing: it takes SQLite's write lock first."""
        return f"UPDATE {self.qualify(TRACKING)} SET name = name WHERE name = {self.mark}"

    def move_tracking(self) -> str:
        m = self.mark
        return (
            f"UPDATE {self.qualify(TRACKING)} SET position = {m}, last_stream = {m}, "
            f"last_position = {m} WHERE name = {m} AND position = {m}"
        )

    def recreate(self, table: ViewTable) -> list[str]:
        name = table_name(table)
        cols = "".join(f', "{c.name}" {KINDS[c.kind]}' for c in table.columns)
        indexes = [
            f'CREATE INDEX {name}_{c} ON {self.qualify(name)} ("{c}", key)' for c in columns(table)
        ]
        return [
            f"DROP TABLE IF EXISTS {self.qualify(name)}",
            f"CREATE TABLE {self.qualify(name)} (key TEXT PRIMARY KEY{cols}, "
            f"body {self.blob} NOT NULL)",
            *indexes,
        ]

    def select_keys(self, table: ViewTable, count: int) -> str:
        marks = ",".join([self.mark] * count)
        return f"SELECT key, body FROM {self.qualify(table_name(table))} WHERE key IN ({marks})"

    def upsert(self, table: ViewTable) -> str:
        cols = columns(table)
        names = ", ".join(["key", *(f'"{c}"' for c in cols), "body"])
        marks = ",".join([self.mark] * (len(cols) + 2))
        sets = ", ".join(f'"{c}" = excluded."{c}"' for c in [*cols, "body"])
        return (
            f"INSERT INTO {self.qualify(table_name(table))} ({names}) VALUES ({marks}) "
            f"ON CONFLICT (key) DO UPDATE SET {sets}"
        )

    def delete(self, table: ViewTable) -> str:
        return f"DELETE FROM {self.qualify(table_name(table))} WHERE key = {self.mark}"

    def query(self, table: ViewTable, q: ViewQuery) -> tuple[str, list[ColumnValue]]:
        known = set(columns(table))
        where: list[str] = []
        params: list[ColumnValue] = []
        for op, terms in (("=", q.equal), (">=", q.at_least), ("<", q.below)):
            for col, value in terms.items():
                _known(col, known, table)
                if value is None and op == "=":
                    where.append(f'"{col}" IS NULL')
                    continue
                where.append(f'"{col}" {op} {self.mark}')
                params.append(value)
        sql = f"SELECT key, body FROM {self.qualify(table_name(table))}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        direction = "DESC" if q.descending else "ASC"
        if q.order_by is not None:
            _known(q.order_by, known, table)
            sql += f' ORDER BY "{q.order_by}" {direction}, key {direction}'
        else:
            sql += f" ORDER BY key {direction}"
        if q.limit is not None or q.offset:
            sql += f" LIMIT {self.mark} OFFSET {self.mark}"
            params += [q.limit if q.limit is not None else 2**62, q.offset]
        return sql, params


def move_params(b: ViewBatch) -> tuple[object, ...]:
    """The parameters of :meth:`ViewSQL.move_tracking` for ``b``."""
    last = b.last
    stream, at = (last.stream, last.position) if last is not None else (None, None)
    return (b.position, stream, at, b.table.name, b.expected)


def tracking_row(view: str, row: Sequence[Any]) -> Tracking:
    """A tracking row read as ``(position, version, last_stream, last_position)``."""
    position, version, stream, at = row
    last = Applied(str(stream), int(at)) if stream is not None and at is not None else None
    return Tracking(view, int(position), str(version), last)


def row_params(row: ViewRow) -> tuple[ColumnValue | bytes, ...]:
    return (row.key, *row.values, row.body)


def _known(col: str, known: set[str], table: ViewTable) -> None:
    if col not in known:
        raise UsageError(f"view {table.name} has no column {col!r}")


def chunks(keys: Sequence[str], size: int = 500) -> list[Sequence[str]]:
    return [keys[i : i + size] for i in range(0, len(keys), size)]
