"""In-process news that runs changed: a run ended, paused or started waiting, a message
was posted, a lock was released. Waiters (a parent on its child, a receive, a lock) wake
at once on news from this process and poll the store for news from others."""

from __future__ import annotations

import threading


class Signals:
    """A change counter and a condition: ``wait(seen, timeout)`` returns when the counter
    moved past ``seen`` or ``timeout`` seconds passed; the counter either way."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def notify(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout)
            return self._version
