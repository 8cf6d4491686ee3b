"""One way to wait for what another thread or process makes true: :func:`poll_until`
looks, pauses a growing delay (backoff), and gives up at a deadline or when told to stop.

A look that finds nothing is followed by a pause: on ``news`` (this process's signal that
something changed, which ends the pause at once), else on ``stop`` (set: the wait ends),
else a plain sleep. The deadline is read on ``clock``: pass the engine's to fake it.
:func:`poll_until_async` is the same wait for a coroutine: its pauses are on the event
loop, which they do not block. Both drive one loop, :class:`_Looks`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class News(Protocol):
    """Changes announced within this process: ``version`` moves on each; ``wait`` returns
    once it moved past ``seen``, or after ``timeout`` seconds."""

    @property
    def version(self) -> int: ...

    def wait(self, seen: int, timeout: float) -> object: ...


def poll_until(
    ready: Callable[[], T | None],
    seconds: float | None,
    *,
    first: float = 0.01,
    most: float = 0.5,
    news: News | None = None,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T | None:
    """What ``ready()`` returns once it is not None or False, looking again after a pause
    that starts at ``first`` and doubles up to ``most``; None when ``seconds`` (None:
    no deadline) passed on ``clock`` or ``stop`` was set first. The first look is at once,
    and a last look is made at the deadline."""
    seen = 0

    def look() -> T | None:
        nonlocal seen
        seen = news.version if news is not None else 0  # before looking: news ends the pause
        return ready()

    looks = _Looks(look, seconds, first, most, clock, stop)
    for pause in looks:
        if news is not None:
            news.wait(seen, pause)
        elif stop is not None:
            stop.wait(pause)
        else:
            sleep(pause)
    return looks.found


async def poll_until_async(
    ready: Callable[[], T | None],
    seconds: float | None,
    *,
    first: float = 0.01,
    most: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
) -> T | None:
    """:func:`poll_until` on an event loop: each pause is an ``asyncio.sleep``."""
    import asyncio  # here: a CLI command that never waits on a loop does not load asyncio

    looks = _Looks(ready, seconds, first, most, clock, None)
    for pause in looks:
        await asyncio.sleep(pause)
    return looks.found


class _Looks(Generic[T]):
    """The loop itself: iterating looks, and yields the pause to take before the next
    look (the caller takes it); it ends with ``found`` set to what a look found, or
    None at the deadline or once ``stop`` was set."""

    def __init__(
        self,
        ready: Callable[[], T | None],
        seconds: float | None,
        first: float,
        most: float,
        clock: Callable[[], float],
        stop: threading.Event | None,
    ) -> None:
        self.ready, self.first, self.most, self.clock, self.stop = ready, first, most, clock, stop
        self.end = math.inf if seconds is None else clock() + seconds
        self.found: T | None = None

    def __iter__(self) -> Iterator[float]:
        delay = self.first
        while True:
            found = self.ready()
            if found is not None and found is not False:
                self.found = found
                return
            left = self.end - self.clock()
            if left <= 0 or (self.stop is not None and self.stop.is_set()):
                return
            yield min(delay, left)
            delay = min(delay * 2, self.most)


__all__ = ["News", "poll_until", "poll_until_async"]
