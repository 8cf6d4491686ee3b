"""The store's views facade: projections' tables beside the log, their bodies sealed like
every other payload when the store is encrypted, every foreign error translated."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from ..errors import CorruptData
from .cipher import ClearRows, Row
from .ports import Tracking, ViewBatch, ViewQuery, ViewRow, ViewStore, ViewTable

_NS = uuid.UUID("0b6f3f55-5a4e-4e0e-9f0e-7a3d7d2f1c44")


def damaged_view(view: str, what: str) -> CorruptData:
    """The one error of a view whose rows or tracking do not read: views are derived
    from the log, so rebuilding one repairs it."""
    return CorruptData(
        f"view {view} is damaged: {what}; `agentlog projections rebuild {view}` builds it "
        "again from the log"
    )


class Views:
    """Tracking rows and view tables of one store (see :class:`ViewStore`)."""

    def __init__(
        self,
        name: str,
        port: ViewStore,
        rows: ClearRows,
        translated: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self.name = name
        self.port = port
        self._rows = rows
        self._translated = translated

    def _row(self, view: str, key: str) -> Row:
        return Row("views", uuid.uuid5(_NS, view), 0, key)

    def _seal(self, view: str, key: str, body: bytes) -> bytes:
        return self._rows.seal(self._row(view, key), body)

    def _unseal(self, view: str, key: str, body: bytes) -> bytes:
        return self._rows.unseal(self.name, self._row(view, key), body)

    def tracking(self, view: str) -> Tracking | None:
        with self._translated():
            try:
                return self.port.tracking(view)
            except (ValueError, TypeError) as e:  # a position that is no integer
                raise damaged_view(view, f"its tracking row does not read ({e})") from None

    def reset(self, table: ViewTable, version: str, keep_current: bool = False) -> None:
        with self._translated():
            self.port.reset_view(table, version, keep_current)

    def rows(self, table: ViewTable, keys: Sequence[str]) -> dict[str, bytes]:
        with self._translated():
            found = self.port.view_rows(table, keys)
        return {k: self._unseal(table.name, k, b) for k, b in found.items()}

    def query(self, table: ViewTable, query: ViewQuery) -> list[bytes]:
        with self._translated():
            found = self.port.query_view(table, query)
        return [self._unseal(table.name, k, b) for k, b in found]

    def commit(
        self,
        table: ViewTable,
        expected: int,
        position: int,
        upserts: Sequence[ViewRow],
        deletes: Sequence[str] = (),
    ) -> bool:
        """One view's rows and its new position, in one transaction, if it is still at
        ``expected`` (False: nothing written)."""
        [done] = self.commit_many([ViewBatch(table, expected, position, upserts, deletes)])
        return done

    def commit_many(self, batches: Sequence[ViewBatch]) -> list[bool]:
        """Each batch's rows and its view's new position, in one transaction (see
        :meth:`ViewStore.commit_views`); whether each view's went in."""
        if self._rows.encrypted:
            batches = [self._sealed(b) for b in batches]
        with self._translated():
            return self.port.commit_views(batches)

    def _sealed(self, b: ViewBatch) -> ViewBatch:
        name = b.table.name
        upserts = [ViewRow(r.key, r.values, self._seal(name, r.key, r.body)) for r in b.upserts]
        return ViewBatch(b.table, b.expected, b.position, upserts, b.deletes)

    def wait_for_events(self, after: int, timeout: float) -> bool:
        with self._translated():
            return self.port.wait_for_events(after, timeout)
