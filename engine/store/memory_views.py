"""Views' tables in memory, under the events recorder's lock (so a follower can wait on
the same condition appends notify)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from ..errors import UsageError
from .ports import ColumnValue, Tracking, ViewBatch, ViewQuery, ViewStore, ViewTable
from .viewsql import check_name, columns

_Row = tuple[tuple[ColumnValue, ...], bytes]


class _Events(Protocol):
    """The memory events recorder, as far as views need it."""

    changed: threading.Condition

    def max_notification_id(self) -> int | None: ...


class MemoryViews(ViewStore):
    def __init__(self, events: _Events) -> None:
        self.events = events
        self.lock = events.changed
        self.tables: dict[str, dict[str, _Row]] = {}
        self.tracked: dict[str, Tracking] = {}

    def tracking(self, view: str) -> Tracking | None:
        with self.lock:
            return self.tracked.get(view)

    def reset_view(self, table: ViewTable, version: str, keep_current: bool = False) -> None:
        columns(table)
        with self.lock:
            tracked = self.tracked.get(table.name)
            if keep_current and tracked is not None and tracked.version == version:
                return
            self.tables[check_name(table.name)] = {}
            self.tracked[table.name] = Tracking(table.name, 0, version)

    def view_rows(self, table: ViewTable, keys: Sequence[str]) -> dict[str, bytes]:
        with self.lock:
            rows = self.tables.get(table.name, {})
            return {k: rows[k][1] for k in keys if k in rows}

    def query_view(self, table: ViewTable, query: ViewQuery) -> list[tuple[str, bytes]]:
        names = columns(table)
        for name in [*query.equal, *query.at_least, *query.below, query.order_by]:
            if name is not None and name not in names:
                raise UsageError(f"view {table.name} has no column {name!r}")
        at = {n: i for i, n in enumerate(names)}
        with self.lock:
            rows = list(self.tables.get(table.name, {}).items())
        chosen = [
            (k, vals, body)
            for k, (vals, body) in rows
            if all(vals[at[c]] == v for c, v in query.equal.items())
            and all(_ge(vals[at[c]], v) for c, v in query.at_least.items())
            and all(_lt(vals[at[c]], v) for c, v in query.below.items())
        ]
        index = at.get(query.order_by or "")

        def order(item: tuple[str, tuple[ColumnValue, ...], bytes]) -> tuple[bool, object, str]:
            v = item[1][index] if index is not None else None
            return (v is not None, v if v is not None else 0, item[0])

        chosen.sort(key=order, reverse=query.descending)
        end = None if query.limit is None else query.offset + query.limit
        return [(k, body) for k, _v, body in chosen[query.offset : end]]

    def commit_views(self, batches: Sequence[ViewBatch]) -> list[bool]:
        done = []
        with self.lock:
            for b in batches:
                tracked = self.tracked.get(b.table.name)
                done.append(tracked is not None and tracked.position == b.expected)
                if tracked is None or not done[-1]:
                    continue
                rows = self.tables.setdefault(b.table.name, {})
                for r in b.upserts:
                    rows[r.key] = (r.values, r.body)
                for k in b.deletes:
                    rows.pop(k, None)
                self.tracked[b.table.name] = Tracking(
                    b.table.name, b.position, tracked.version, b.last
                )
        return done

    def wait_for_events(self, after: int, timeout: float) -> bool:
        with self.lock:
            return self.lock.wait_for(
                lambda: (self.events.max_notification_id() or 0) > after, timeout
            )


def _ge(value: ColumnValue, bound: float) -> bool:
    return isinstance(value, int | float) and value >= bound


def _lt(value: ColumnValue, bound: float) -> bool:
    return isinstance(value, int | float) and value < bound
