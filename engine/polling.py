"""One way to wait for what another thread or process makes true: :func:`poll_until`
looks, pauses a growing delay (backoff), and gives up at a deadline or when told to stop.

A look that finds nothing is followed by a pause: on ``news`` (this process's signal that
something changed, which ends the pause at once), else on ``stop`` (set: the wait ends),
else a plain sleep. The deadline is read on ``clock``: pass the engine's to fake it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

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
    end = math.inf if seconds is None else clock() + seconds
    delay = first
    while True:
        seen = news.version if news is not None else 0  # before looking: news ends the pause
        found = ready()
        if found is not None and found is not False:
            return found
        left = end - clock()
        if left <= 0 or (stop is not None and stop.is_set()):
            return None
        pause = min(delay, left)
        if news is not None:
            news.wait(seen, pause)
        elif stop is not None:
            stop.wait(pause)
        else:
            sleep(pause)
        delay = min(delay * 2, most)


__all__ = ["News", "poll_until"]
