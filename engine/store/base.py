"""The store facade: one append-only log of many streams, snapshots, blobs, a run index
and owner leases, over the ports of :mod:`engine.store.ports`.

A :class:`Store` encodes events, seals payloads, moves large ones out of line and
translates every foreign error at this boundary; backends (memory, SQLite, PostgreSQL)
only provide the recorders, and keep the run index in the same transaction as the events.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import (
    AggregateRecorder,
    ConnectionPoolClosedError,
    IntegrityError,
    PersistenceError,
    StoredEvent,
)

from .. import observe
from ..errors import (
    CipherError,
    ConcurrencyError,
    CorruptData,
    LeaseTaken,
    PayloadTooLarge,
    StoreError,
    UsageError,
)
from ..events import Event
from .cipher import SEALED, ClearRows, Row
from .codec import decode_event, encode_event
from .locking import Locks
from .ports import Fence, LeaseStore, LockStore, RunIndex, RunRecorder, RunRow, ViewStore
from .queueing import Queues, QueueStore
from .schedules import MemorySchedules, Schedules, ScheduleStore
from .views import Views

BLOB_THRESHOLD = 256 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024
BLOB_CHUNK = 1024 * 1024
# Inline bytes per commit. psycopg's pipeline mode hangs sending ~5 MB in one insert,
# so the part of a large batch beyond this goes out of line like any large payload.
MAX_INLINE_BATCH = 2 * 1024 * 1024
BLOB_SUFFIX = "@blob"
_NS = uuid.UUID("6d1f4c1e-8a47-4c39-9a52-6a1f0e0b5a11")
FOREIGN = (LeaseTaken, IntegrityError, PersistenceError, ConnectionPoolClosedError)  # translated
__all__ = ["Append", "BlobRef", "Recorded", "RunRow", "Snapshot", "Store", "stream_id"]


class Append(msgspec.Struct, frozen=True):
    """One event to append at ``position`` (1-based) of ``stream``."""

    stream: uuid.UUID
    position: int
    event: Event


class Recorded(msgspec.Struct, frozen=True, gc=False):
    """A recorded event with its place in its stream and, when known, in the global log;
    untracked by the cycle collector (it never holds itself): fewer collections."""

    stream: uuid.UUID
    position: int
    event: Event
    global_position: int | None = None


class Snapshot(msgspec.Struct, frozen=True):
    """A snapshot as the store keeps it: the position of the state it holds, its topic
    and its encoded bytes (the domain encodes and decodes them: :mod:`engine.log.snapshots`)."""

    position: int
    topic: str
    payload: bytes


class BlobRef(msgspec.Struct, frozen=True):
    """A blob's address (SHA-256 of its content, keyed in an encrypted store) and size."""

    sha256: str
    size: int


def stream_id(name: str) -> uuid.UUID:
    """The stable stream id of a named stream (an effect key, a tool)."""
    return uuid.uuid5(_NS, name)


class Store(RunIndex, LeaseStore):
    """One agentlog store; ``name`` is its URL with any password masked. ``rows`` says
    how payloads are stored: in clear, or sealed (encryption at rest). ``close``
    releases the backend's connections. A ``read_only`` store (an empty one opened
    without creating it) refuses every append with one clear error."""

    def __init__(
        self,
        name: str,
        events: RunRecorder,
        snapshots: AggregateRecorder,
        blobs: AggregateRecorder,
        leases: LeaseStore,
        views: ViewStore,
        *,
        locks: LockStore,
        queues: QueueStore,
        schedules: ScheduleStore | None = None,
        close: Callable[[], None] = lambda: None,
        blob_threshold: int = BLOB_THRESHOLD,
        max_payload: int = MAX_PAYLOAD,
        rows: ClearRows | None = None,
        read_only: bool = False,
    ) -> None:
        if not 0 < blob_threshold <= max_payload:
            raise UsageError("blob_threshold must be positive and at most max_payload")
        self.name = name
        self._events = events
        self._snapshots = snapshots
        self._blobs = blobs
        self._leases = leases
        self._close = close
        self.blob_threshold = blob_threshold
        self.max_payload = max_payload
        self.rows = rows or ClearRows()
        self.read_only = read_only
        # Projections' tables and tracking rows, in the same database as the log.
        self.views = Views(name, views, self.rows, self._translated)
        self.locks = Locks(locks, self._translated)  # cross-agent locks, fencing tokens
        self.queues = Queues(queues, self._translated)  # queued runs, limits, workers
        # What the workers start on their own, and when (a read-only store: none).
        port = MemorySchedules() if schedules is None else schedules
        self.schedules = Schedules(name, port, self.rows, self._translated, self._writable)

    def _writable(self) -> None:
        if self.read_only:
            raise UsageError(
                f"{self.name}: no store here yet (opened without creating one, it reads as "
                "empty and refuses writes); nothing was written: run, demo or import create it"
            )

    @property
    def encrypted(self) -> bool:
        """Whether payloads, snapshots and blobs are stored encrypted."""
        return self.rows.encrypted

    # --- errors --------------------------------------------------------------------

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except FOREIGN as e:
            raise self._translation(e) from (None if isinstance(e, LeaseTaken) else e)

    def _translation(self, e: Exception) -> Exception:
        """A backend's error (:data:`FOREIGN`) as ours, named with the store."""
        if isinstance(e, LeaseTaken):  # a fenced append refused
            return LeaseTaken(f"{self.name}: {e}")
        if isinstance(e, IntegrityError):
            return ConcurrencyError(
                f"{self.name}: a conflicting append committed first; nothing was written"
            )
        closed = not isinstance(e, PersistenceError)  # eventsourcing's pool, closed
        return StoreError(f"{self.name}: " + ("the store is closed" if closed else _first_line(e)))

    # --- events --------------------------------------------------------------------

    def append(
        self, items: Sequence[Append], runs: Sequence[RunRow] = (), fence: Fence | None = None
    ) -> list[int]:
        """Append events of one or more streams (and run-index rows) in one transaction;
        their global positions. Nothing is written on :class:`ConcurrencyError` (a position
        is taken) nor on :class:`LeaseTaken` (``fence``'s run lease has a newer epoch:
        another owner took the run); without a fence, nothing is checked."""
        self._writable()
        encoded = [encode_event(a.event) for a in items]  # every size checked before a blob
        for a, (_topic, payload) in zip(items, encoded, strict=True):
            self._check_size(len(payload), a.event)
        stored, inline, threshold = [], 0, self.blob_threshold
        for a, (topic, payload) in zip(items, encoded, strict=True):
            if len(payload) > threshold or inline + len(payload) > MAX_INLINE_BATCH:
                topic, payload = self._out_of_line(topic, payload, force=True)
            inline += len(payload)
            if self.rows.encrypted:  # guarded: the hot path in clear builds no Row
                payload = self.rows.seal(Row("events", a.stream, a.position, topic), payload)
            stored.append(StoredEvent(a.stream, a.position, topic, payload))
        try:  # not _translated: a context manager less on the hot path
            ids = self._events.insert_events(stored, runs=runs, fence=fence)
        except FOREIGN as e:
            raise self._translation(e) from (None if isinstance(e, LeaseTaken) else e)
        return list(ids or [])

    def read(self, stream: uuid.UUID, *, after: int = 0, upto: int | None = None) -> list[Recorded]:
        """The events of ``stream`` with ``after < position <= upto``, in order."""
        with self._translated():
            rows = self._events.select_events(stream, gt=after or None, lte=upto)
        return [Recorded(stream, r.originator_version, self._decode(stream, r)) for r in rows]

    def last_position(self, stream: uuid.UUID) -> int:
        with self._translated():
            rows = self._events.select_events(stream, desc=True, limit=1)
        return rows[0].originator_version if rows else 0

    def stream_length(self, stream: uuid.UUID) -> int:
        """How many events ``stream`` holds: its last position, unless one was lost."""
        with self._translated():
            return self._events.stream_length(stream)

    def read_all(self, after: int = 0, limit: int = 1000) -> list[Recorded]:
        """Events of every stream in global order, starting after global position ``after``."""
        with self._translated():
            rows = self._events.select_notifications(after + 1, limit)
        found = []
        for n in rows:
            stream = _as_uuid(n.originator_id)
            try:
                event = self._decode(stream, n)
            except CorruptData as e:  # say where in the global order: a reader stops there
                raise CorruptData(f"the event at global position {n.id}: {e}") from e
            found.append(Recorded(stream, n.originator_version, event, n.id))
        return found

    def max_global_position(self) -> int:
        with self._translated():
            return self._events.max_notification_id() or 0

    def _decode(self, stream: uuid.UUID, r: StoredEvent) -> Event:
        topic, payload = r.topic, r.state
        if self.rows.encrypted or payload[:2] == SEALED:
            payload = self._unseal(Row("events", stream, r.originator_version, topic), payload)
        if topic.endswith(BLOB_SUFFIX):
            topic = topic[: -len(BLOB_SUFFIX)]
            payload = self.get_blob(msgspec.msgpack.decode(payload, type=BlobRef))
        return decode_event(topic, payload)

    def _unseal(self, row: Row, data: bytes) -> bytes:
        """``data`` opened; a row of the kind the settings do not expect (in clear with
        the key, encrypted without) names a store of both kinds as such."""
        try:
            return self.rows.unseal(self.name, row, data)
        except CipherError as e:
            if (data[:2] == SEALED) == self.rows.encrypted:
                raise  # the right kind that does not open: another key, or altered
            from .mixed import mixed_or
            from .rawrows import raw_rows

            raw = raw_rows(self._events, self._snapshots, self._blobs, self.views.port)
            runs = {stream_id("run:" + r.run_id): r.run_id for r in self.runs()}
            raise mixed_or(self.name, raw, runs, e) from None

    # --- run index ---------------------------------------------------------------

    def runs(self, status: str | None = None) -> list[RunRow]:
        """Run-index rows, newest first, optionally of one status."""
        with self._translated():
            return self._events.runs(status)

    def runs_started(self, low: float, high: float) -> list[RunRow]:
        """Run-index rows of runs started at ``low <= started_at <= high``."""
        with self._translated():
            return self._events.runs_started(low, high)

    def indexed_position(self, run_id: str) -> int | None:
        """The last position the run index recorded for ``run_id`` (None: not indexed)."""
        with self._translated():
            return self._events.indexed_position(run_id)

    def run_ids(self, prefix: str) -> list[str]:
        """Ids of runs that start with ``prefix`` (at most a few)."""
        with self._translated():
            return self._events.run_ids(prefix)

    def children(self, parent_run_id: str) -> list[RunRow]:
        """Rows of the runs whose parent is ``parent_run_id`` (children and forks), oldest first."""
        with self._translated():
            return self._events.children(parent_run_id)

    # --- owner leases (operational state beside the log, not history) --------------

    def take_lease_fenced(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> tuple[str, int]:
        """Take or renew the lease of ``run_id`` for ``owner`` unless someone else holds an
        unexpired one (``dead`` names a holder known to be gone). Returns the holder and
        the lease's epoch, which the holder's writers carry as their :class:`Fence`."""
        with self._translated():
            return self._leases.take_lease_fenced(run_id, owner, until, now, dead)

    def drop_lease(self, run_id: str, owner: str) -> None:
        with self._translated():
            self._leases.drop_lease(run_id, owner)

    def lease(self, run_id: str) -> tuple[str, float] | None:
        """``(owner, expires_at)`` of the run's lease, if it has one."""
        with self._translated():
            return self._leases.lease(run_id)

    # --- snapshots (bytes with a topic: the store knows no state type) -------------

    def save_snapshot(self, stream: uuid.UUID, snapshot: Snapshot) -> None:
        """Store ``snapshot`` of ``stream``; saving it twice is harmless."""
        self._writable()
        self._check_size(len(snapshot.payload), None)
        topic, data = self._out_of_line(snapshot.topic, snapshot.payload)
        data = self.rows.seal(Row("snapshots", stream, snapshot.position, topic), data)
        with contextlib.suppress(ConcurrencyError), self._translated():
            self._snapshots.insert_events([StoredEvent(stream, snapshot.position, topic, data)])

    def snapshots(self, stream: uuid.UUID, position: int | None) -> Iterator[Snapshot]:
        """The snapshots of ``stream`` at or before ``position``, newest first, read a few
        at a time; one whose blob is missing or corrupt is skipped with a warning. A
        :class:`CipherError` (a key problem, not a damaged row) is raised."""
        upto = position
        while True:
            with self._translated():
                rows = self._snapshots.select_events(stream, lte=upto, desc=True, limit=8)
            for r in rows:
                try:
                    yield self._snapshot(stream, r)
                except (msgspec.DecodeError, msgspec.ValidationError, CorruptData) as e:
                    observe.get().warning(
                        "snapshot_skipped",
                        stream=str(stream),
                        position=r.originator_version,
                        error=_first_line(e),
                    )
            if len(rows) < 8:
                return
            upto = rows[-1].originator_version - 1

    def _snapshot(self, stream: uuid.UUID, r: StoredEvent) -> Snapshot:
        """A snapshot row unsealed and, if it was moved out of line, fetched from its blob."""
        payload = self._unseal(Row("snapshots", stream, r.originator_version, r.topic), r.state)
        topic = r.topic.removesuffix(BLOB_SUFFIX)
        if topic != r.topic:
            payload = self.get_blob(msgspec.msgpack.decode(payload, type=BlobRef))
        return Snapshot(r.originator_version, topic, payload)

    # --- blobs ---------------------------------------------------------------------

    def _check_size(self, size: int, event: Event | None) -> None:
        if size > self.max_payload:
            what = type(event).__struct_config__.tag if event is not None else "snapshot"
            raise PayloadTooLarge(
                f"{what} payload of {size} bytes exceeds the {self.max_payload}-byte cap; "
                "nothing was written"
            )

    def _out_of_line(self, topic: str, payload: bytes, force: bool = False) -> tuple[str, bytes]:
        if len(payload) <= self.blob_threshold and not force:
            return topic, payload
        ref = self.put_blob(payload)
        return topic + BLOB_SUFFIX, msgspec.msgpack.encode(ref)

    def put_blob(self, data: bytes) -> BlobRef:
        """Store ``data`` content-addressed, in chunks, each in its own small commit."""
        self._writable()
        ref = BlobRef(self.rows.address(data), len(data))
        sid = stream_id("blob:" + ref.sha256)
        chunks = max(1, -(-len(data) // BLOB_CHUNK))
        with self._translated():
            present = self._blobs.select_events(sid, desc=True, limit=1)
        have = present[0].originator_version if present else 0
        for i in range(have, chunks):
            part = data[i * BLOB_CHUNK : (i + 1) * BLOB_CHUNK]
            part = self.rows.seal(Row("blobs", sid, i + 1, "blob"), part)
            # Another writer storing the same content wins the race harmlessly.
            with contextlib.suppress(ConcurrencyError), self._translated():
                self._blobs.insert_events([StoredEvent(sid, i + 1, "blob", part)])
        return ref

    def get_blob(self, ref: BlobRef) -> bytes:
        sid = stream_id("blob:" + ref.sha256)
        with self._translated():
            rows = self._blobs.select_events(sid)
        data = b"".join(
            self.rows.unseal(self.name, Row("blobs", sid, r.originator_version, r.topic), r.state)
            for r in rows
        )
        if len(data) != ref.size or self.rows.address(data) != ref.sha256:
            raise CorruptData(f"{self.name}: blob {ref.sha256[:12]} is missing or corrupt")
        return data

    def close(self) -> None:
        """Release the backend's connections."""
        self._close()


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
