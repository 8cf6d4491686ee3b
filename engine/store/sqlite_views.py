"""Views' tables in the SQLite file, beside the log; followers poll for new events."""

from __future__ import annotations

from collections.abc import Sequence

from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from .. import failpoints
from ..polling import poll_until
from .ports import Tracking, ViewBatch, ViewQuery, ViewStore, ViewTable
from .viewsql import TRACKING, ViewSQL, chunks, move_params, row_params, tracking_row

POLL = 0.05  # seconds between looks at the log while following it


class SQLiteViews(ViewStore):
    def __init__(self, datastore: SQLiteDatastore, events: SQLiteApplicationRecorder) -> None:
        self.datastore = datastore
        self.events = events
        self.sql = ViewSQL(lambda name: name, "?", "BLOB")

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(self.sql.create_tracking())
            c.execute(f"PRAGMA table_info({TRACKING})")
            if "last_stream" in {str(r[1]) for r in c.fetchall()}:
                return
        # A table made by an older agentlog. A write first: the transaction takes the write
        # lock (waiting its turn) before it looks again, so two processes opening the
        # store at once add the columns once.
        with self.datastore.transaction(commit=True) as c:
            c.execute(self.sql.touch_tracking(), ("",))
            c.execute(f"PRAGMA table_info({TRACKING})")
            if "last_stream" not in {str(r[1]) for r in c.fetchall()}:
                for statement in self.sql.add_applied():
                    c.execute(statement)

    def tracking(self, view: str) -> Tracking | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(self.sql.select_tracking(), (view,))
            row = c.fetchone()
        return None if row is None else tracking_row(view, tuple(row))

    def reset_view(self, table: ViewTable, version: str, keep_current: bool = False) -> None:
        with self.datastore.transaction(commit=True) as c:
            # A write first: the transaction takes the write lock (waiting its turn) before
            # it reads the schema, so two runners creating one view at once take turns.
            c.execute(self.sql.touch_tracking(), (table.name,))
            if keep_current:
                c.execute(self.sql.select_tracking(), (table.name,))
                row = c.fetchone()
                if row is not None and row[1] == version:
                    return
            c.execute(self.sql.put_tracking(), (table.name, 0, version))
            for statement in self.sql.recreate(table):
                c.execute(statement)

    def view_rows(self, table: ViewTable, keys: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self.datastore.transaction(commit=False) as c:
            for part in chunks(keys):
                c.execute(self.sql.select_keys(table, len(part)), tuple(part))
                found.update((str(k), bytes(b)) for k, b in c.fetchall())
        return found

    def query_view(self, table: ViewTable, query: ViewQuery) -> list[tuple[str, bytes]]:
        sql, params = self.sql.query(table, query)
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, params)
            return [(str(k), bytes(b)) for k, b in c.fetchall()]

    def commit_views(self, batches: Sequence[ViewBatch]) -> list[bool]:
        done = []
        with self.datastore.transaction(commit=True) as c:
            for b in batches:
                c.execute(self.sql.move_tracking(), move_params(b))
                done.append(c.sqlite_cursor.rowcount == 1)
                if not done[-1]:
                    continue  # another runner moved this view: write none of its rows
                failpoints.hit("in_view_commit")  # a crash here rolls the whole batch back
                c.executemany(self.sql.upsert(b.table), [row_params(r) for r in b.upserts])
                c.executemany(self.sql.delete(b.table), [(k,) for k in b.deletes])
        return done

    def wait_for_events(self, after: int, timeout: float) -> bool:
        def newer() -> bool:
            return (self.events.max_notification_id() or 0) > after

        return bool(poll_until(newer, timeout, first=POLL, most=POLL))
