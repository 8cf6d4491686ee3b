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
    __slots__ = ("batch", "done", "error", "lead", "result", "wake", "work")

    def __init__(self, work: Work) -> None:
        self.work = work
        self.wake: threading.Lock | None = None  # a follower's: released when done or leading
        self.lead = False  # it holds the lead (set before the wake that tells it so)
        self.batch: list[_Request] = []  # the batch it led, if it led one
        self.result: Any = None
        self.error: Exception | None = None
        self.done = False  # its outcome is known (its batch committed, or it was refused)


class GroupCommit:
    """The leader/follower writer of one store object. A caller queues its append; with no
    leader at work it leads: it takes the file's write lock, then every append queued by then
    (up to ``MAX_BATCH``), runs each in a SAVEPOINT (a refusal rolls back only that one),
    COMMITs once and hands the results out, then passes the lead to the next one waiting.

    Ctrl-C (a KeyboardInterrupt between any two lines of the caller that gets it) breaks no
    promise: the interrupted caller leaves the queue, or hands its batch's outcomes out and
    the lead on, so no other caller hangs, none is told success for a row not committed
    and none "none of them was written" for one that is."""

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self._datastore = datastore
        self._mutex = threading.Lock()
        self._queue: list[_Request] = []
        self._leader: _Request | None = None  # None: nobody leads, and the queue is empty
        self.commits = 0  # batches committed (what tests and benchmarks observe)
        self.appends = 0  # appends committed in them

    @property
    def waiting(self) -> int:
        """Appends queued and not yet taken into a batch."""
        return len(self._queue)

    def run(self, work: Work) -> Any:
        """Run ``work`` in the next batch; its result once the batch is durable."""
        req = _Request(work)
        try:
            self._join(req)
            if req.wake is not None:
                req.wake.acquire()  # the leader released it: done, or this one leads now
            if req.lead and not req.done:
                self._lead(req)
        except BaseException:  # Ctrl-C: never leave the queue leaderless, nor a batch untold
            self._abandon(req)
            raise
        if req.error is not None:
            raise req.error
        if not req.done:  # no outcome: never a success for what may not be written
            raise _batch_failed(1, RuntimeError("the append's batch ended without an outcome"))
        return req.result

    def _join(self, req: _Request) -> None:
        with self._mutex:
            self._queue.append(req)
            if self._leader is None:
                req.lead = True
                self._leader = req
            else:
                wake = threading.Lock()
                wake.acquire()
                req.wake = wake

    def _take(self, batch: list[_Request]) -> None:
        with self._mutex:
            # One line, no call between its two stores: whatever interrupts it finds each
            # request either still queued or in the batch, never both, never neither.
            batch[len(batch) :], self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]

    def _lead(self, own: _Request) -> None:
        try:
            self._commit(own.batch)
        except BaseException as e:  # nothing of the batch was written: every append is told
            _fail(own, e)
            if not isinstance(e, Exception):
                raise
        finally:
            self._finish(own)

    def _finish(self, own: _Request) -> None:
        """Pass the lead on (if ``own`` holds it) and release its batch; done again by an
        interrupted caller, so each step may have been done already."""
        with self._mutex:
            if self._leader is own:
                self._pass_lead()
            nxt = self._leader
        if nxt is not None and nxt is not own and nxt.lead:
            _release(nxt)  # told it leads, maybe not woken yet
        for r in own.batch:
            if r is not own:
                _release(r)

    def _pass_lead(self) -> None:  # under the mutex
        if self._queue:
            nxt = self._queue[0]
            nxt.lead = True
            self._leader = nxt
            _release(nxt)
        else:
            self._leader = None

    def _abandon(self, req: _Request) -> None:
        """An interrupted caller leaves the queue if no batch took it yet (then nothing of
        it is written); a leader's batch is told and released; the lead goes on."""
        with self._mutex:
            if req in self._queue:
                self._queue.remove(req)
        _fail(req, KeyboardInterrupt())
        self._finish(req)

    def _commit(self, batch: list[_Request]) -> None:
        outcomes: list[tuple[Any, Exception | None]] | None = None
        with self._datastore.get_connection(commit=True) as conn, conn.cursor() as c:
            try:
                c.execute("BEGIN IMMEDIATE")  # the write lock first: what queues meanwhile joins
                self._take(batch)
                outcomes = _each(c, batch)
                failpoints.hit("in_group_commit")  # a batch written, not committed
                committed = c.connection.in_transaction  # not: a lone append refused
                if committed:
                    c.execute("COMMIT")
                _tell(batch, outcomes)
            except BaseException as e:
                if c.connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        c.execute("ROLLBACK")
                elif outcomes is not None and not isinstance(e, sqlite3.Error):
                    _tell(batch, outcomes)  # interrupted after the COMMIT: the outcomes stand
                if not batch:  # the write lock never came: the ones waiting for it fail too
                    self._take(batch)
                raise
        if committed:
            assert outcomes is not None
            self.commits += 1
            self.appends += len(batch) - sum(error is not None for _, error in outcomes)


def _tell(batch: list[_Request], outcomes: list[tuple[Any, Exception | None]]) -> None:
    for r, (result, error) in zip(batch, outcomes, strict=True):
        r.result, r.error, r.done = result, error, True


def _fail(own: _Request, e: BaseException) -> None:
    """Every append of ``own``'s batch (``own`` too) not told its outcome yet fails with
    what stopped its leader: nothing of the batch was written."""
    why = e if isinstance(e, Exception) else RuntimeError(type(e).__name__)
    batch = own.batch
    for r in batch if own in batch else [*batch, own]:
        if not r.done and r.error is None:  # an append told its outcome keeps it
            r.result, r.error = None, _batch_failed(max(len(batch), 1), why)


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
        with contextlib.suppress(RuntimeError):  # released meanwhile: it is awake
            r.wake.release()
