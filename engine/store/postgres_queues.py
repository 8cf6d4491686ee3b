"""The queue tables on PostgreSQL: every claim of the schema takes one transaction-scoped
advisory lock first, so claims never interleave (``FOR UPDATE SKIP LOCKED`` would let
two claims pass one queue's limit at once: the limit is a count, not a row)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.postgres import PostgresDatastore, PostgresRecorder
from psycopg.sql import SQL, Composable, Identifier

from .queuesql import DDL, SQLQueues


class PostgresQueues(PostgresRecorder):
    """Creates the queue tables in the store's schema; ``port`` is the queue port on them."""

    def __init__(self, datastore: PostgresDatastore, take_lease: Composable) -> None:
        super().__init__(datastore)
        schema = Identifier(datastore.schema)
        self._names: dict[str, Composable] = {
            name: SQL("{0}.{1}").format(schema, Identifier(table))
            for name, table in (
                ("queue", "agentlog_queue"),
                ("limits", "agentlog_queues"),
                ("workers", "agentlog_workers"),
                ("runs", "agentlog_runs"),
                ("leases", "agentlog_leases"),
            )
        }
        self._names["real"] = SQL("double precision")
        # One lock per schema: stores in other schemas of the database claim freely.
        self._lock_id = zlib.crc32(("agentlog_claims:" + datastore.schema).encode())
        self.sql_create_statements.extend(self._sql(s) for s in DDL)  # type: ignore[misc]
        self.port = SQLQueues(
            claiming=self._claiming,
            writing=lambda: self.datastore.transaction(commit=True),
            reading=lambda: self.datastore.transaction(commit=False),
            sql=self._sql,
            take_lease=take_lease,
        )

    def _sql(self, template: str, **fields: Any) -> Composable:
        literal = {k: SQL(str(v).replace("?", "%s")) for k, v in fields.items()}
        return SQL(template.replace("?", "%s")).format(**self._names, **literal)

    @contextmanager
    def _claiming(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
            yield curs
