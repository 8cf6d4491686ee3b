"""Views' tables in the store's PostgreSQL schema, beside the log; followers wake on the
NOTIFY sent after each burst of appends (LISTEN/NOTIFY), and look again every
``RECHECK`` seconds without one (the NOTIFY is a hint: a writer killed before sending it
loses it)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg.sql import SQL, Identifier

from .. import failpoints
from .ports import Tracking, ViewBatch, ViewQuery, ViewStore, ViewTable
from .viewsql import TRACKING, ViewSQL, chunks, move_params, row_params, tracking_row

RECHECK = 1.0  # seconds a follower waits on the hint before it looks again


class PostgresViews(ViewStore):
    def __init__(self, datastore: PostgresDatastore, events: PostgresApplicationRecorder) -> None:
        self.datastore = datastore
        self.events = events
        schema = '"' + datastore.schema.replace('"', '""') + '"'
        self.sql = ViewSQL(lambda name: f"{schema}.{name}", "%s", "bytea", "IF NOT EXISTS ")

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(self.sql.create_tracking())
            # Checked first: an ALTER would lock the table on every open, even a no-op one.
            c.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s AND column_name = 'last_stream'",
                (self.datastore.schema, TRACKING),
            )
            if c.fetchone() is None:  # a table made by an older agentlog
                for statement in self.sql.add_applied():
                    c.execute(statement)

    def tracking(self, view: str) -> Tracking | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(self.sql.select_tracking(), (view,))
            row = c.fetchone()
        if row is None:
            return None
        names = ("position", "version", "last_stream", "last_position")
        return tracking_row(view, [row[n] for n in names])

    def reset_view(self, table: ViewTable, version: str, keep_current: bool = False) -> None:
        with self.datastore.transaction(commit=True) as c:
            # Two runners creating one view at once would collide in the catalog: take
            # turns (the lock is the transaction's, released at its end). The tracking row
            # before the table, in the order a commit takes them: no deadlock with one.
            c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_name(table),))
            if keep_current:
                c.execute(self.sql.select_tracking(), (table.name,))
                row = c.fetchone()
                if row is not None and row["version"] == version:
                    return
            c.execute(self.sql.put_tracking(), (table.name, 0, version))
            for statement in self.sql.recreate(table):
                c.execute(statement)

    def _lock_name(self, table: ViewTable) -> str:
        return f"agentlog_view:{self.datastore.schema}:{table.name}"

    def view_rows(self, table: ViewTable, keys: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self.datastore.transaction(commit=False) as c:
            for part in chunks(keys):
                c.execute(self.sql.select_keys(table, len(part)), tuple(part))
                found.update((str(r["key"]), bytes(r["body"])) for r in c.fetchall())
        return found

    def query_view(self, table: ViewTable, query: ViewQuery) -> list[tuple[str, bytes]]:
        sql, params = self.sql.query(table, query)
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, params)
            return [(str(r["key"]), bytes(r["body"])) for r in c.fetchall()]

    def commit_views(self, batches: Sequence[ViewBatch]) -> list[bool]:
        done = []
        with self.datastore.transaction(commit=True) as c:
            for b in batches:
                c.execute(self.sql.move_tracking(), move_params(b))
                done.append(c.rowcount == 1)
                if not done[-1]:
                    continue  # another runner moved this view: write none of its rows
                failpoints.hit("in_view_commit")  # a crash here rolls the whole batch back
                if b.upserts:
                    c.executemany(self.sql.upsert(b.table), [row_params(r) for r in b.upserts])
                if b.deletes:
                    c.executemany(self.sql.delete(b.table), [(k,) for k in b.deletes])
        return done

    def wait_for_events(self, after: int, timeout: float) -> bool:
        # The channel is the events table's name, shared by every schema of the server:
        # a notification may be another store's, so wake, look, and wait on if it was.
        deadline = time.monotonic() + timeout
        channel = Identifier(self.events.channel_name)
        with self.datastore.get_connection() as conn:
            conn.execute(SQL("LISTEN {0}").format(channel))
            try:
                while (self.events.max_notification_id() or 0) <= after:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    for _ in conn.notifies(timeout=min(left, RECHECK), stop_after=1):
                        pass
            finally:
                conn.execute(SQL("UNLISTEN {0}").format(channel))
        return True
