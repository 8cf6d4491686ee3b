"""The store's ports, each as small as its callers need, in eventsourcing's style.

:class:`RunRecorder` is eventsourcing's public ``ApplicationRecorder`` (events with a
global order) plus the :class:`RunIndex`, written in the same commit as the events, as
eventsourcing's ``ProcessRecorder`` adds tracking records to an application recorder.
Snapshots and blobs are plain ``AggregateRecorder`` rows of bytes. :class:`LeaseStore`
holds owner leases, operational state beside the log, and :class:`LockStore` the
cross-agent locks with their fencing tokens. Backends raise eventsourcing's
``PersistenceError`` family; the :class:`~engine.store.base.Store` facade translates it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import ApplicationRecorder, StoredEvent

from ..errors import LeaseTaken

TABLES = ("agentlog_events", "agentlog_snapshots", "agentlog_blobs")


class RunRow(msgspec.Struct, frozen=True):
    """A row of the run index, written in the same commit as lifecycle events."""

    run_id: str
    agent: str
    status: str
    started_at: float
    updated_at: float
    parent_run_id: str | None = None
    position: int = 0
    # "root", "child" or "fork" (engine.kinds.LineageKind); None: a row an older agentlog
    # wrote with a parent (its agent_started tells: engine.runtime.run.catalog).
    lineage: str | None = None

    def params(self) -> tuple[object, ...]:
        """The row's values in column order, for an insert."""
        return (
            self.run_id,
            self.agent,
            self.status,
            self.started_at,
            self.updated_at,
            self.parent_run_id,
            self.position,
            self.lineage,
        )


class RunIndex(ABC):
    """The run index: one row per run (agent, status, last position) for listing runs
    without reading their logs."""

    @abstractmethod
    def runs(self, status: str | None = None) -> list[RunRow]:
        """Rows newest first (by start time, then id), optionally of one status."""

    @abstractmethod
    def runs_started(self, low: float, high: float) -> list[RunRow]:
        """Rows of runs started at ``low <= started_at <= high`` (each run's start is its
        first event's time): the rows of new runs, without reading the whole index."""

    @abstractmethod
    def run_ids(self, prefix: str) -> list[str]:
        """At most ten ids that start with ``prefix`` (case-sensitive), in code-point order."""

    @abstractmethod
    def indexed_position(self, run_id: str) -> int | None:
        """The last position the index recorded for ``run_id`` (None: not indexed)."""

    @abstractmethod
    def children(self, parent_run_id: str) -> list[RunRow]:
        """Rows whose ``parent_run_id`` is this run (its child runs and its forks: their
        ``lineage`` tells them apart), oldest first (by start time, then id)."""


class Fence(msgspec.Struct, frozen=True):
    """A writer's claim on a run: the epoch of the run's lease its owner took. An append
    carrying it is refused (``LeaseTaken``, nothing written) when the run's lease has a
    newer epoch, checked in the append's own transaction: an owner presumed dead while
    paused writes nothing once another owner took the run over."""

    run_id: str
    epoch: int


class LeaseStore(ABC):
    """Owner leases: which owner may execute a run, until when, and the lease's epoch.

    The epoch starts at 1 and grows by one whenever the lease passes to another owner
    (a takeover, or a take after it was dropped), never on a renewal by its holder. A
    lease row is never deleted (dropping it empties its owner), so no epoch is reused."""

    @abstractmethod
    def take_lease_fenced(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> tuple[str, int]:
        """Take or renew the lease of ``run_id`` for ``owner`` unless another holds one
        that has not expired at ``now`` (``dead`` names a holder known to be gone).
        Returns ``(holder, epoch)`` after the attempt."""

    def take_lease(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> str:
        """:meth:`take_lease_fenced`, returning the holder only."""
        return self.take_lease_fenced(run_id, owner, until, now, dead)[0]

    @abstractmethod
    def drop_lease(self, run_id: str, owner: str) -> None:
        """Release the lease if ``owner`` holds it (its row stays, owned by nobody, with
        its epoch); otherwise do nothing."""

    @abstractmethod
    def lease(self, run_id: str) -> tuple[str, float] | None:
        """``(owner, expires_at)`` of the run's lease, if someone holds one."""


class LockRow(msgspec.Struct, frozen=True):
    """A cross-agent lock held now: its name, the run holding it, its fencing token and
    when it expires (epoch seconds) unless renewed."""

    name: str
    holder: str
    fence: int
    expires_at: float


class LockStore(ABC):
    """Cross-agent locks (``agentlog_locks``): one row per name, never deleted, so its
    fencing token increases strictly across all of the name's holders. A holder is a run
    id; an expired lock is free to take."""

    @abstractmethod
    def acquire(
        self, name: str, holder: str, until: float, now: float, keep_fence: int = 0
    ) -> int | None:
        """Take ``name`` for ``holder`` until ``until`` if it is free, expired at ``now``
        or ``holder``'s: its new fence (the last one + 1). With ``keep_fence``, take it
        only if its fence is still that one (nobody took it since) and it is still
        ``holder``'s or free, and keep the fence.
        None: not taken. Atomic against every other writer."""

    @abstractmethod
    def renew(self, name: str, holder: str, fence: int, until: float) -> bool:
        """Extend the hold of ``holder`` with ``fence`` to ``until``; False if that hold
        is gone (released, or another took the lock after it expired)."""

    @abstractmethod
    def release(self, name: str, holder: str, fence: int) -> bool:
        """Free ``name`` if ``holder`` holds it with ``fence``; whether it did."""

    @abstractmethod
    def release_all(self, holder: str) -> list[str]:
        """Free every lock ``holder`` holds; the names freed."""

    @abstractmethod
    def held(self, now: float) -> list[LockRow]:
        """The locks held and not expired at ``now``, by name."""


def lease_taken(fence: Fence, epoch: int | None = None) -> LeaseTaken:
    """The error a backend raises when it refuses a fenced append: the run's lease is at
    ``epoch``, newer than the fence's (the Store facade adds the store's name)."""
    newer = f"epoch {epoch}" if epoch is not None else "a newer epoch"
    return LeaseTaken(
        f"run {fence.run_id}: its lease was taken by another owner ({newer}, this "
        f"writer holds epoch {fence.epoch}); nothing was written"
    )


class RunRecorder(ApplicationRecorder, RunIndex):
    """An application recorder whose ``insert_events(events, runs=rows)`` upserts the
    run-index rows in the same transaction as the events: both commit or neither does."""

    @abstractmethod
    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        runs: Sequence[RunRow] = (),
        fence: Fence | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        """Insert the events and upsert ``runs`` atomically; the events' notification ids.
        An event whose position is taken raises eventsourcing's ``IntegrityError``; with
        ``fence``, a run lease of a newer epoch raises ``LeaseTaken`` and writes nothing."""

    @abstractmethod
    def stream_length(self, stream: UUID) -> int:
        """How many events ``stream`` holds (a count over its rows, on the primary key's
        index): equal to its last position unless an event was lost."""

    def release(self) -> None:  # optional: most recorders hold nothing
        """Stop what the recorder runs in the background (before its connections close)."""


# --- views: tables of projections, beside the log ----------------------------------------

ColumnValue = str | int | float | None


class Column(msgspec.Struct, frozen=True):
    """A column of a view's table that readers filter or sort by: ``kind`` is ``text``,
    ``int`` or ``real``. The row itself is stored whole, as bytes."""

    name: str
    kind: str = "text"


class ViewTable(msgspec.Struct, frozen=True):
    """A view's table, ``agentlog_view_<name>``: a text key, ``columns`` (each indexed)
    and the row's bytes. ``name`` and column names are ``[a-z][a-z0-9_]*``."""

    name: str
    columns: tuple[Column, ...] = ()


class ViewRow(msgspec.Struct, frozen=True):
    """One row of a view: its key, its column values (in the table's column order) and
    its body."""

    key: str
    values: tuple[ColumnValue, ...]
    body: bytes


class Applied(msgspec.Struct, frozen=True):
    """The identity of the last event a view applied: its stream and its position there
    (what the event at the tracked global position must be, or the row was moved)."""

    stream: str  # the stream id's hex
    position: int


class ViewBatch(msgspec.Struct, frozen=True):
    """One view's changes from one batch of events: its rows, and its tracking moved from
    ``expected`` to ``position``, the global position of the event ``last``."""

    table: ViewTable
    expected: int
    position: int
    upserts: Sequence[ViewRow] = ()
    deletes: Sequence[str] = ()
    last: Applied | None = None


class ViewQuery(msgspec.Struct, frozen=True):
    """Which rows of a view to read: columns equal to values, a column at least / below a
    bound, ordered by a column (then key), a page of them."""

    equal: dict[str, ColumnValue] = {}
    at_least: dict[str, float] = {}
    below: dict[str, float] = {}
    order_by: str | None = None
    descending: bool = True
    limit: int | None = None
    offset: int = 0


class Tracking(msgspec.Struct, frozen=True):
    """How far a view has processed the log: the last global position it applied, the
    version of the code that built it and the identity of the event at that position
    (None: nothing applied yet, or a row written before agentlog kept it)."""

    view: str
    position: int
    version: str
    last: Applied | None = None


class ViewStore(ABC):
    """Views' tables and their tracking rows. A batch of row changes and the view's new
    position commit in one transaction, and only if the tracked position is still the
    one the batch started from: every event is applied exactly once, even with two
    runners of one view."""

    @abstractmethod
    def tracking(self, view: str) -> Tracking | None:
        """The view's tracking row (None: never built)."""

    @abstractmethod
    def reset_view(self, table: ViewTable, version: str, keep_current: bool = False) -> None:
        """(Re)create the view's table empty and track it at position 0 for ``version``;
        with ``keep_current``, a view tracked for ``version`` by now (another runner made
        it meanwhile) is left as it is."""

    @abstractmethod
    def view_rows(self, table: ViewTable, keys: Sequence[str]) -> dict[str, bytes]:
        """The bodies of the rows with these keys (absent keys are left out)."""

    @abstractmethod
    def query_view(self, table: ViewTable, query: ViewQuery) -> list[tuple[str, bytes]]:
        """``(key, body)`` of the rows ``query`` selects, in its order."""

    @abstractmethod
    def commit_views(self, batches: Sequence[ViewBatch]) -> list[bool]:
        """In one transaction, for each batch: move its view's tracking row from
        ``expected`` to ``position`` (and ``last``) and apply its changes; a view whose row
        no longer says ``expected`` gets nothing written (False in its place) and the
        others go on."""

    @abstractmethod
    def wait_for_events(self, after: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an event after global position ``after``;
        whether one is there (PostgreSQL: LISTEN/NOTIFY; SQLite: polling)."""
