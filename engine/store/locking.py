"""The store's cross-agent locks as the runtime and the CLI use them: ``store.locks``.

Every name and ttl is checked here (one clear ``UsageError``) before a backend sees it,
and every backend error is translated as the rest of the store translates it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

from ..errors import StoreError, UsageError
from .ports import LockRow, LockStore

MAX_NAME = 200
MAX_TTL = 24 * 3600.0  # a day: a hold that long without a heartbeat is a mistake

__all__ = ["MAX_NAME", "MAX_TTL", "LockRow", "Locks", "check_name", "check_ttl"]


def check_name(name: object) -> str:
    """``name`` if it is a lock name: 1 to 200 printable characters (no control,
    format or separator characters other than the space)."""
    if not isinstance(name, str):
        raise UsageError(f"a lock name is a string, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME:
        raise UsageError(f"a lock name has 1 to {MAX_NAME} characters, not {len(name)}")
    if not name.isprintable():
        raise UsageError(f"lock name {name!r} holds a control or unprintable character")
    return name


def check_ttl(ttl: object) -> float:
    """``ttl`` as seconds if it is a finite number above 0 and at most a day."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise UsageError(f"a lock's ttl is a number of seconds, not {type(ttl).__name__}")
    if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL):
        raise UsageError(f"a lock's ttl is above 0 and at most {MAX_TTL:g} seconds, not {ttl}")
    return float(ttl)


MAX_FENCE = 2**63 - 1  # the largest integer both SQL backends store exactly


def check_fence(name: str, fence: int) -> None:
    """UsageError for a fencing token no lock can have issued."""
    if not 0 <= fence < MAX_FENCE:
        raise UsageError(f"lock {name!r}: {fence} is not a fencing token (0 to {MAX_FENCE - 1})")


def _exhausted(name: str) -> StoreError:
    return StoreError(
        f"lock {name!r} has used every fencing token up to {MAX_FENCE - 1}: no larger one "
        "can be issued; use a lock of another name"
    )


class Locks:
    """The locks of one store (its :class:`LockStore`, checked and translated)."""

    def __init__(
        self,
        port: LockStore,
        translated: Callable[[], contextlib.AbstractContextManager[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._port = port
        self._translated = translated
        self._clock = clock  # wall-clock epoch seconds: expiry is compared across hosts

    def acquire(self, name: str, holder: str, ttl: float, keep_fence: int = 0) -> int | None:
        """Take ``name`` for ``holder`` for ``ttl`` seconds: its fence, None if another
        holds it (or, with ``keep_fence``, if that fence is no longer the lock's)."""
        check_name(name)
        ttl = check_ttl(ttl)
        now = self._clock()
        check_fence(name, keep_fence)
        try:
            with self._translated():
                fence = self._port.acquire(name, holder, now + ttl, now, keep_fence)
        except StoreError as e:  # PostgreSQL: the bigint cannot be incremented
            if "out of range" in str(e):
                raise _exhausted(name) from e
            raise
        if fence is not None and fence >= MAX_FENCE:  # SQLite went past it into a float
            raise _exhausted(name)
        return fence

    def renew(self, name: str, holder: str, fence: int, ttl: float) -> bool:
        """Extend the hold for another ``ttl`` seconds; False if it is gone."""
        until = self._clock() + check_ttl(ttl)
        check_fence(name, fence)
        with self._translated():
            return self._port.renew(check_name(name), holder, fence, until)

    def release(self, name: str, holder: str, fence: int) -> bool:
        check_fence(name, fence)
        with self._translated():
            return self._port.release(check_name(name), holder, fence)

    def release_all(self, holder: str) -> list[str]:
        """Free every lock the run ``holder`` holds (it ended); the names freed."""
        with self._translated():
            return self._port.release_all(holder)

    def held(self) -> list[LockRow]:
        """The locks held now (not expired), by name."""
        with self._translated():
            return self._port.held(self._clock())
