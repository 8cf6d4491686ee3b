"""The store's ports, each as small as its callers need, in eventsourcing's style.

:class:`RunRecorder` is eventsourcing's public ``ApplicationRecorder`` (events with a
global order) plus the :class:`RunIndex`, written in the same commit as the events, as
eventsourcing's ``ProcessRecorder`` adds tracking records to an application recorder.
Snapshots and blobs are plain ``AggregateRecorder`` rows of bytes. :class:`LeaseStore`
holds owner leases, operational state beside the log. Backends raise eventsourcing's
``PersistenceError`` family; the :class:`~engine.store.base.Store` facade translates it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import ApplicationRecorder, StoredEvent


class RunRow(msgspec.Struct, frozen=True):
    """A row of the run index, written in the same commit as lifecycle events."""

    run_id: str
    agent: str
    status: str
    started_at: float
    updated_at: float
    parent_run_id: str | None = None
    position: int = 0

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
        )


class RunIndex(ABC):
    """The run index: one row per run (agent, status, last position) for listing runs
    without reading their logs."""

    @abstractmethod
    def runs(self, status: str | None = None) -> list[RunRow]:
        """Rows newest first (by start time, then id), optionally of one status."""

    @abstractmethod
    def run_ids(self, prefix: str) -> list[str]:
        """At most ten ids that start with ``prefix`` (case-sensitive), in code-point order."""

    @abstractmethod
    def indexed_position(self, run_id: str) -> int | None:
        """The last position the index recorded for ``run_id`` (None: not indexed)."""


class LeaseStore(ABC):
    """Owner leases: which owner may execute a run, until when."""

    @abstractmethod
    def take_lease(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> str:
        """Take or renew the lease of ``run_id`` for ``owner`` unless another holds one
        that has not expired at ``now`` (``dead`` names a holder known to be gone).
        Returns the holder after the attempt."""

    @abstractmethod
    def drop_lease(self, run_id: str, owner: str) -> None:
        """Release the lease if ``owner`` holds it; otherwise do nothing."""

    @abstractmethod
    def lease(self, run_id: str) -> tuple[str, float] | None:
        """``(owner, expires_at)`` of the run's lease, if it has one."""


class RunRecorder(ApplicationRecorder, RunIndex):
    """An application recorder whose ``insert_events(events, runs=rows)`` upserts the
    run-index rows in the same transaction as the events: both commit or neither does."""

    @abstractmethod
    def insert_events(
        self, stored_events: Sequence[StoredEvent], *, runs: Sequence[RunRow] = (), **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert the events and upsert ``runs`` atomically; the events' notification ids.
        An event whose position is taken raises eventsourcing's ``IntegrityError``."""
