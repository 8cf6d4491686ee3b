"""PostgreSQL appends without a global lock, and readers that never see a global position
out of commit order.

Writers: ``agentlog_append`` takes ``pg_advisory_xact_lock_shared(K)`` first (the
*writers' barrier*, ``K`` derived from the schema and the events table), then draws its
notification ids in the INSERT. Shared locks do not conflict: writers run and commit in
parallel (their commits can share an fsync). No table lock, no NOTIFY in the transaction
(PostgreSQL's PreCommit_Notify serialises every notifying commit of the database).

Readers: ``agentlog_head()`` takes ``pg_advisory_xact_lock(K)`` (exclusive: it waits for
every writer in flight, and holds new ones back for that instant only), reads the ids
sequence's ``last_value`` as the horizon H and, in a statement after the lock (a new
snapshot: a VOLATILE function's statements each take one in READ COMMITTED), the largest
visible id <= H; the call is its own transaction, so the lock ends with it. Every writer
that drew an id <= H held the shared lock then, so it had ended (committed or rolled back)
before the reader got K: PostgreSQL releases a transaction's locks after its commit is
visible (CommitTransaction: ProcArrayEndTransaction, then ResourceOwnerRelease of the
locks), so a snapshot taken after the lock sees it. Any writer after draws ids > H. So a
read of ``notification_id <= H`` in a later snapshot is final: nothing below H can appear
later. Gaps (rolled-back writers) stay gaps, as before. The sequence must not cache
values per session (bigserial's CACHE 1, as eventsourcing creates it; an opener refuses more).

Cheap path: a read whose rows are all at or below a horizon already proven needs no
barrier; a read that finds nothing returns nothing (there is nothing to skip).

Upgrade: every opener runs CREATE OR REPLACE, and a plpgsql function is recompiled in
every session when its row changes, so an older process's next append runs this body.
A body with new parameters (``lineages``) is a new overload: an older process keeps
calling its own, whose rows leave ``lineage`` NULL (read from the run's start instead). A
transaction of the old body still in flight holds the EXCLUSIVE table lock without the
barrier: the reader's ``LOCK TABLE ... IN ROW SHARE MODE`` conflicts with exactly that
mode (not with writers' ROW EXCLUSIVE or autovacuum), so it waits for those too. Readers
of an older agentlog (a plain MAX) are not safe against lock-free writers: during a
rolling deploy, upgrade the followers (projection runners) with or before the writers.

Followers wake on a NOTIFY sent after the commit by a per-store :class:`BurstNotifier`
thread, one per burst of appends; it is a hint only (followers re-check on a timer too).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

from eventsourcing.persistence import Notification
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg.sql import SQL, Composed, Identifier

HINT_SPACING = 0.005  # seconds at least between two hints: a NOTIFY is a commit of its own
FENCED = "ALF01"  # the SQLSTATE agentlog_append raises when a fenced append is refused

# One statement, one round trip: the barrier's shared side, the fence check (FOR SHARE:
# no lease changes hands between this look and the commit), the run-index upsert, and
# the insert that draws the notification ids.
APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.agentlog_append(
    ids {idtype}[], versions bigint[], topics text[], states bytea[],
    run_ids text[], agents text[], statuses text[], started float8[], updated float8[],
    parents text[], positions bigint[], lineages text[], fence_run text, fence_epoch bigint
) RETURNS SETOF bigint LANGUAGE plpgsql AS $fn$
DECLARE
    newer bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared({key});
    -- The events table before the run index, in the order an opener's CREATE ... IF NOT
    -- EXISTS statements lock them (SHARE): no deadlock with a process opening the store.
    LOCK TABLE {schema}.{table} IN ROW EXCLUSIVE MODE;
    IF fence_run IS NOT NULL THEN
        SELECT l.epoch INTO newer FROM {schema}.agentlog_leases l
            WHERE l.run_id = fence_run FOR SHARE;
        IF newer > fence_epoch THEN
            RAISE EXCEPTION 'the run''s lease is at a newer epoch'
                USING ERRCODE = '{fenced}', DETAIL = newer::text;
        END IF;
    END IF;
    INSERT INTO {schema}.agentlog_runs AS r
        (run_id, agent, status, started_at, updated_at, parent_run_id, position, lineage)
        SELECT * FROM unnest(
            run_ids, agents, statuses, started, updated, parents, positions, lineages
        )
        ON CONFLICT (run_id) DO UPDATE SET agent = excluded.agent, status = excluded.status,
            updated_at = excluded.updated_at, position = excluded.position,
            lineage = coalesce(excluded.lineage, r.lineage);
    RETURN QUERY INSERT INTO {schema}.{table}
        (originator_id, originator_version, topic, state)
        SELECT * FROM unnest(ids, versions, topics, states)
        RETURNING notification_id;
END
$fn$
"""

# The readers' side of the barrier (see the module's docstring).
HEAD_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.agentlog_head(OUT horizon bigint, OUT head bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    LOCK TABLE {schema}.{table} IN ROW SHARE MODE;
    PERFORM pg_advisory_xact_lock({key});
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END
        INTO horizon FROM {schema}.{sequence} s;
    SELECT max(e.notification_id) INTO head FROM {schema}.{table} e
        WHERE e.notification_id <= horizon;
END
$fn$
"""


def barrier_key(schema: str, table: str) -> int:
    """The writers' barrier's advisory-lock key: advisory locks are per database, so the
    key names the schema and the table (a signed 64-bit integer, as PostgreSQL takes)."""
    digest = hashlib.blake2b(f"agentlog_append:{schema}.{table}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def function_statements(datastore: PostgresDatastore, table: str) -> list[Composed]:
    """The CREATE OR REPLACE statements of ``agentlog_append`` and ``agentlog_head``."""
    names = {
        "schema": Identifier(datastore.schema),
        "table": Identifier(table),
        "key": SQL(str(barrier_key(datastore.schema, table))),
    }
    append = SQL(APPEND_FUNCTION).format(
        idtype=Identifier(datastore.originator_id_type), fenced=SQL(FENCED), **names
    )
    head = SQL(HEAD_FUNCTION).format(sequence=Identifier(f"{table}_notification_id_seq"), **names)
    return [append, head]


class OrderedReads(PostgresApplicationRecorder):
    """``select_notifications`` and ``max_notification_id`` that only return positions
    below a horizon the writers' barrier proved final (see the module's docstring)."""

    _horizon = 0  # the largest horizon proven so far: ids at or below it are final

    def _barrier(self) -> tuple[int, int | None]:
        """(H, the largest visible id <= H), through the readers' side of the barrier."""
        call = SQL("SELECT horizon, head FROM {0}.agentlog_head()").format(
            Identifier(self.datastore.schema)
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(call, prepare=True)
            row = curs.fetchone()
        assert row is not None
        horizon = int(row["horizon"])
        # Racing threads may store a smaller one: that only costs a barrier later.
        self._horizon = max(self._horizon, horizon)
        return horizon, row["head"]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        proven = self._horizon  # before the read: only a horizon proven earlier vouches
        found: Sequence[Notification] = super().select_notifications(
            start, limit, stop, topics, inclusive_of_start=inclusive_of_start
        )
        if not found or found[-1].id <= proven:
            return found  # nothing yet, or only final ids, read after their horizon
        horizon, _ = self._barrier()
        stop = horizon if stop is None else min(stop, horizon)
        found = super().select_notifications(
            start, limit, stop, topics, inclusive_of_start=inclusive_of_start
        )
        return found

    def max_notification_id(self) -> int | None:
        visible: int | None = super().max_notification_id()
        if visible is None or visible <= self._horizon:
            return visible  # nothing above a proven horizon is visible
        return self._barrier()[1]


class BurstNotifier:
    """Sends one ``NOTIFY channel`` per burst of appends, after their commits, in its own
    transaction: :meth:`poke` after each commit wakes the thread, pokes during a send
    coalesce into the next. Started on the first poke (again in a forked child); stopped,
    after a last pending hint, by :meth:`close`."""

    def __init__(self, datastore: PostgresDatastore, channel: str) -> None:
        self._datastore = datastore
        self._channel = channel
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending = False
        self._closed = False
        self.sent = 0  # hints sent: for tests

    def poke(self) -> None:
        self._pending = True
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._start:
                if self._closed:
                    return
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name="agentlog-pg-notify", daemon=True
                    )
                    self._thread.start()
        self._wake.set()

    def after_fork(self) -> None:
        """In a forked child: the parent's thread is not here and its locks may be held;
        start afresh (a closed notifier stays closed)."""
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._start = threading.Lock()
        self._thread = None
        self._pending = False
        self.sent = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        with self._start:
            self._closed = True
            thread = self._thread
        self._stopping.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._pending:
                self._pending = False
                self._send()
                if not self._closed:  # the appends of the next moments share one hint
                    self._stopping.wait(HINT_SPACING)
            if self._closed:
                return

    def _send(self) -> None:
        try:
            with self._datastore.get_connection() as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
            self.sent += 1
        except Exception:  # a hint only: followers re-check on a timer
            self._wake.wait(0.1)  # no hot loop while the server is away
