"""The SQLite store's connection pool: eventsourcing's, with our durability pragma, a
statement cache per connection, and a close that never closes a connection in use."""

from __future__ import annotations

import sqlite3
import weakref

from eventsourcing.persistence import OperationalError
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool

# Writers queue for SQLite's one write lock: wait for it (sqlite3's busy timeout) and for
# a pooled connection this long, rather than failing after 5 s on a loaded machine.
LOCK_WAIT = 30
STATEMENT_CACHE = 128  # parsed statements kept per connection


class Pool(SQLiteConnectionPool):
    """eventsourcing's pool; each connection it hands out gets our durability pragma the
    first time (the busy timeout is the pool's own ``lock_timeout``)."""

    def __init__(self, *, db_name: str, synchronous: str) -> None:
        super().__init__(db_name=db_name, lock_timeout=LOCK_WAIT, pool_timeout=LOCK_WAIT)
        self.synchronous = synchronous
        self.tuned: weakref.WeakSet[SQLiteConnection] = weakref.WeakSet()

    def _create_connection(self) -> SQLiteConnection:
        """A connection of the store's file. sqlite3 keeps the parsed statements of each
        connection (``cached_statements``): an append's five statements are compiled once,
        not at every commit (eventsourcing passes ``True``, a cache of one)."""
        try:
            conn = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,  # the pool hands a connection to one thread at a time
                isolation_level=None,  # transactions are begun and committed explicitly
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or LOCK_WAIT,
            )
            if not self.is_journal_mode_wal:
                conn.execute("PRAGMA journal_mode=WAL")
                self.is_journal_mode_wal = True
        except sqlite3.Error as e:
            raise OperationalError(str(e)) from e
        conn.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=conn, max_age=self.max_age)

    def close(self) -> None:
        """Close the idle connections; one another thread is using is closed when that
        thread gives it back (eventsourcing closes it under the thread's feet, and
        sqlite3 can crash the process when a connection is closed mid-statement)."""
        with self._put_condition:
            if self._closed:
                return
            self._closed = True
            idle = list(self._pool)
            self._pool.clear()
        for conn in idle:
            conn.close()

    def put_connection(self, conn: SQLiteConnection) -> None:
        with self._put_condition:
            closed = self._closed
        if not closed:
            super().put_connection(conn)
            return
        conn.close()  # the store closed while this connection was out: its work is done
        is_writer, conn.is_writer = conn.is_writer, None
        with self._put_condition:
            self._in_use.pop(id(conn), None)
        conn.in_use.release()
        if is_writer is True:
            self._writer_lock.release()  # a writer waiting for it is refused: the pool is closed

    def get_connection(
        self, timeout: float | None = None, *, is_writer: bool | None = None
    ) -> SQLiteConnection:
        conn = super().get_connection(timeout, is_writer=is_writer)
        if conn not in self.tuned:
            try:
                conn.cursor().execute(f"PRAGMA synchronous={self.synchronous}")
            except sqlite3.Error as e:  # outside eventsourcing's transaction, which translates
                self.put_connection(conn)
                raise OperationalError(str(e)) from e
            self.tuned.add(conn)
        return conn
