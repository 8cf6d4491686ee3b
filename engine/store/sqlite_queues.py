"""The queue tables on SQLite: every claim of the file holds its write lock from its
first statement (a counter row written first), so claims never interleave."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.sqlite import SQLiteDatastore, SQLiteRecorder

from .queuesql import DDL, SQLQueues

_NAMES = {
    "queue": "agentlog_queue",
    "limits": "agentlog_queues",
    "workers": "agentlog_workers",
    "runs": "agentlog_runs",
    "leases": "agentlog_leases",
    "real": "REAL",
}
_CLAIMS_DDL = (
    "CREATE TABLE IF NOT EXISTS agentlog_claims (id INTEGER PRIMARY KEY, claims INTEGER NOT NULL)"
)
# A real write, first: BEGIN is deferred, and a claim that read before it wrote could not
# take the write lock once another claim committed (SQLITE_BUSY_SNAPSHOT).
_COUNT_CLAIM = (
    "INSERT INTO agentlog_claims VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET claims = claims + 1"
)


def _sql(template: str, **fields: Any) -> str:
    return template.format(**_NAMES, **fields)


class SQLiteQueues(SQLiteRecorder):
    """Creates the queue tables; ``port`` is the queue port on them."""

    def __init__(self, datastore: SQLiteDatastore, take_lease: str) -> None:
        super().__init__(datastore)
        self.port = SQLQueues(
            claiming=self._claiming,
            writing=lambda: self.datastore.transaction(commit=True),
            reading=lambda: self.datastore.transaction(commit=False),
            sql=_sql,
            take_lease=take_lease,
        )

    def construct_create_table_statements(self) -> list[str]:
        return [*(_sql(s) for s in DDL), _CLAIMS_DDL]

    @contextmanager
    def _claiming(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=True) as c:
            c.execute(_COUNT_CLAIM)
            yield c
