"""PostgreSQL stores across ``os.fork()``: a child inherits the parent's pool (its
connections are the parent's sessions, its worker threads are gone) and the notifier (its
thread is gone, its locks may be held). In the child, every open store gets a new, empty
pool and a new notifier state; the inherited connections are never used or closed there
(closing one would end the parent's session: psycopg leaves a connection a child inherits
alone when it is collected, and the old pools are kept so that nothing is collected).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from eventsourcing.postgres import PostgresDatastore

_OPEN: weakref.WeakSet[ForkGuard] = weakref.WeakSet()
_INHERITED: list[Any] = []  # the parents' pools, in this child: never collected, never used


class ForkGuard:
    """What a forked child of a process holding this store renews: the datastore's pool
    (made anew by ``fresh_pool``) and whatever ``also`` resets (the notifier)."""

    def __init__(
        self,
        datastore: PostgresDatastore,
        fresh_pool: Callable[[], Any],
        also: Callable[[], None],
    ) -> None:
        self._datastore = datastore
        self._fresh_pool = fresh_pool
        self._also = also
        _OPEN.add(self)

    def in_child(self) -> None:
        _INHERITED.append(self._datastore.pool)
        self._datastore.pool = self._fresh_pool()
        self._also()

    def release(self) -> None:
        """The store closed: nothing to renew in a later child."""
        _OPEN.discard(self)


def _renew_all() -> None:
    for guard in list(_OPEN):
        guard.in_child()


os.register_at_fork(after_in_child=_renew_all)
