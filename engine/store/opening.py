"""The SQL backends' one constructor: agentlog's tables on a datastore, created if
missing, behind a :class:`~engine.store.base.Store`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from eventsourcing.persistence import AggregateRecorder

from .base import Store
from .ports import TABLES, LeaseStore, LockStore, RunRecorder, ViewStore
from .schedules import ScheduleStore


class _Tables(Protocol):
    def create_table(self) -> None: ...


def open_tables(
    name: str,
    datastore: Any,
    events: Callable[..., RunRecorder],
    aggregates: Callable[..., AggregateRecorder],
    leases: LeaseStore,
    views: Callable[[Any, Any], ViewStore],
    *,
    locks: LockStore,
    queues: Callable[[Any, Any], Any],
    schedules: ScheduleStore,
    **options: Any,
) -> Store:
    """The SQL backends' one constructor: agentlog's events, snapshots and blobs tables
    (and the leases' and views' tracking) on ``datastore``, created if missing. The store closes the
    datastore, and so does a failure here."""
    try:
        recorders = (
            events(datastore, events_table_name=TABLES[0]),
            aggregates(datastore, events_table_name=TABLES[1]),
            aggregates(datastore, events_table_name=TABLES[2]),
        )
        view_store = views(datastore, recorders[0])
        queue_tables = queues(datastore, leases)
        for r in (*recorders, leases, view_store, locks, queue_tables, schedules):
            cast(_Tables, r).create_table()

        def close() -> None:
            try:
                recorders[0].release()
            finally:
                datastore.close()

        return Store(
            name,
            *recorders,
            leases,
            view_store,
            locks=locks,
            queues=queue_tables.port,
            schedules=schedules,
            close=close,
            **options,
        )
    except BaseException:
        datastore.close()
        raise
