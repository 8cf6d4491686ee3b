"""Group commit on SQLite: the appends a store object's threads make at the same moment share
one transaction and one fsync. Each caller returns only once that COMMIT returned, with its
own result or its own error; a failed COMMIT fails every append of its batch."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing import persistence as es
from eventsourcing.sqlite import SQLiteDatastore

from .. import failpoints

Work = Callable[[sqlite3.Cursor], Any]
"""One append's statements on the batch's cursor: its result, or it raises to refuse."""

MAX_BATCH = 64  # the write lock is held for a whole batch: bound how long others wait

# sqlite3's errors as eventsourcing names them (as its own transactions do), subclasses first.
_NAMED: tuple[tuple[type[sqlite3.Error], type[es.PersistenceError]], ...] = (
    (sqlite3.InterfaceError, es.InterfaceError),
    (sqlite3.DataError, es.DataError),
    (sqlite3.OperationalError, es.OperationalError),
    (sqlite3.IntegrityError, es.IntegrityError),
    (sqlite3.InternalError, es.InternalError),
    (sqlite3.ProgrammingError, es.ProgrammingError),
    (sqlite3.NotSupportedError, es.NotSupportedError),
    (sqlite3.DatabaseError, es.DatabaseError),
    (sqlite3.Error, es.PersistenceError),
)


def named(e: Exception) -> Exception:
    """``e`` as the store facade expects it: a sqlite3 error becomes eventsourcing's."""
    for raw, ours in _NAMED:
        if isinstance(e, raw):
            err = ours(e)
            err.__cause__ = e
            return err
    return e


class _Request:
    __slots__ = ("done", "error", "lead", "result", "wake", "work")

    def __init__(self, work: Work) -> None:
        self.work = work
        self.wake: threading.Lock | None = None  # a follower's: released when done or leading
        self.lead = False
        self.result: Any = None
        self.error: Exception | None = None
        self.done = False  # its outcome is known (its batch committed, or it was refused)


class GroupCommit:
    """The leader/follower writer of one store object. A caller queues its append; with no
    leader at work it leads: it takes the file's write lock, then every append queued by then
    (up to ``MAX_BATCH``), runs each in a SAVEPOINT (a refusal rolls back only that one),
    COMMITs once and hands the results out, then passes the lead to the next one waiting."""

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self._datastore = datastore
        self._mutex = threading.Lock()
        self._queue: list[_Request] = []
        self._leading = False  # False: nobody leads, and the queue is empty
        self.commits = 0  # batches committed (what tests and benchmarks observe)
        self.appends = 0  # appends committed in them

    @property
    def waiting(self) -> int:
        """Appends queued and not yet taken into a batch."""
        return len(self._queue)

    def run(self, work: Work) -> Any:
        """Run ``work`` in the next batch; its result once the batch is durable."""
        req = _Request(work)
        with self._mutex:
            self._queue.append(req)
            follow = self._leading
            if follow:
                req.wake = threading.Lock()
                req.wake.acquire()
            else:
                self._leading = True
        if req.wake is not None:
            try:
                req.wake.acquire()  # the leader released it: done, or this one leads now
            except BaseException:  # Ctrl-C in the main thread: never leave the queue leaderless
                self._abandon(req)
                raise
        if req.wake is None or req.lead:
            self._lead(req)
        if req.error is not None:
            raise req.error
        return req.result

    def _take(self) -> list[_Request]:
        with self._mutex:
            if len(self._queue) <= MAX_BATCH:
                batch, self._queue = self._queue, []
            else:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        return batch

    def _lead(self, own: _Request) -> None:
        batch: list[_Request] = []
        try:
            self._commit(batch)
        except BaseException as e:  # nothing of the batch was written: every append is told
            why = e if isinstance(e, Exception) else RuntimeError(type(e).__name__)
            for r in batch:
                if not r.done:  # an append told its outcome keeps it (Ctrl-C after COMMIT)
                    r.result, r.error = None, _batch_failed(len(batch), why)
            if own not in batch:  # not taken: it fails with what stopped the leader
                own.error = _batch_failed(1, why)
            if not isinstance(e, Exception):
                raise
        finally:
            with self._mutex:
                self._pass_lead()
            for r in batch:
                if r is not own:
                    _release(r)

    def _pass_lead(self) -> None:  # under the mutex
        if self._queue:
            self._queue[0].lead = True
            _release(self._queue[0])
        else:
            self._leading = False

    def _abandon(self, req: _Request) -> None:
        """An interrupted follower leaves the queue if no batch took it yet (then nothing of
        it is written), passing the lead on if it had just been given to it."""
        with self._mutex:
            if req in self._queue:
                self._queue.remove(req)
                if req.lead:
                    self._pass_lead()

    def _commit(self, batch: list[_Request]) -> None:
        with self._datastore.get_connection(commit=True) as conn, conn.cursor() as c:
            try:
                c.execute("BEGIN IMMEDIATE")  # the write lock first: what queues meanwhile joins
                batch.extend(self._take())
                outcomes = _each(c, batch)
                failpoints.hit("in_group_commit")  # a batch written, not committed
                committed = c.connection.in_transaction  # not: a lone append refused
                if committed:
                    c.execute("COMMIT")
                for r, (result, error) in zip(batch, outcomes, strict=True):
                    r.result, r.error, r.done = result, error, True
            except BaseException:
                if c.connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        c.execute("ROLLBACK")
                if not batch:  # the write lock never came: the ones waiting for it fail too
                    batch.extend(self._take())
                raise
        if committed:
            self.commits += 1
            self.appends += len(batch) - sum(error is not None for _, error in outcomes)


def _each(c: sqlite3.Cursor, batch: list[_Request]) -> list[tuple[Any, Exception | None]]:
    """Every append of the batch, each in its savepoint (none for a batch of one: its own
    refusal rolls the transaction back). Raises when the transaction itself is lost."""
    alone = len(batch) == 1
    outcomes: list[tuple[Any, Exception | None]] = []
    for r in batch:
        if not alone:
            c.execute("SAVEPOINT agentlog_append")
        try:
            result = r.work(c)
        except Exception as e:
            if alone:
                if c.connection.in_transaction:
                    c.execute("ROLLBACK")
                return [(None, named(e))]
            if not c.connection.in_transaction:
                raise  # SQLite rolled it all back (I/O error, disk full): the batch is lost
            c.execute("ROLLBACK TO agentlog_append")
            outcomes.append((None, named(e)))
        else:
            outcomes.append((result, None))
        if not alone:
            c.execute("RELEASE agentlog_append")
    return outcomes


def _batch_failed(size: int, e: Exception) -> Exception:
    """One error per caller, the same words for all: nothing of the batch was written."""
    err = es.OperationalError(
        f"the group commit of {size} append(s) failed, none of them was written: {e}"
    )
    err.__cause__ = e
    return err


def _release(r: _Request) -> None:
    if r.wake is not None and r.wake.locked():
        r.wake.release()
