"""News of the store for the live pages: one thread per UI waits for appends the way the
store offers (LISTEN/NOTIFY on PostgreSQL, polling on SQLite) and counts them; every open
page's stream waits on that count, so a hundred open tabs cost one store wait, not a
hundred. The thread stops once no page has listened for a while."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import anyio

from engine import observe

if TYPE_CHECKING:
    from engine.store import Store

LOOK_S = 1.0  # the longest one store wait lasts (then the thread looks whether to stop)
IDLE_S = 30.0  # no page listened this long: the thread stops (the next listener restarts it)
TICK_S = 0.2  # how often a stream waiting in the event loop looks at the count


class News:
    """A count of the store's appends seen, and a condition to wait on it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._changed = threading.Condition()
        self._count = 0
        self._listened = time.monotonic()
        self._thread: threading.Thread | None = None
        self.stopped = False

    def stop(self) -> None:
        """The server stops: every wait returns now, and the streams end."""
        with self._changed:
            self.stopped = True
            self._changed.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """The count once it moved past ``seen``, or after ``timeout`` seconds."""
        with self._changed:
            self._listened = time.monotonic()
            if self._thread is None:  # appends from now on are news
                after = self.store.max_global_position()
                self._thread = threading.Thread(
                    target=self._watch, args=(after,), name="agentlog-ui-news", daemon=True
                )
                self._thread.start()
            self._changed.wait_for(lambda: self._count != seen or self.stopped, timeout)
            return self._count

    async def waited(self, seen: int, timeout: float) -> int:
        """:meth:`wait` for a stream: the count looked at every ``TICK_S`` in the event
        loop, so a page left open holds no worker thread while it waits (the pages and
        actions share those threads; 40 open pages would otherwise stall them all)."""
        count = await anyio.to_thread.run_sync(self.wait, seen, 0)  # (re)starts the watch
        ends = time.monotonic() + timeout
        while count == seen and not self.stopped and time.monotonic() < ends:
            await anyio.sleep(TICK_S)
            with self._changed:
                self._listened = time.monotonic()
                count = self._count
        return count

    def _watch(self, after: int) -> None:
        log = observe.get()
        try:
            while True:
                with self._changed:
                    if self.stopped or time.monotonic() - self._listened > IDLE_S:
                        self._thread = None
                        return
                if self.store.views.wait_for_events(after, LOOK_S):
                    # read before the count moves: a page woken by it sees all up to here,
                    # and the next wait is for what comes after
                    after = self.store.max_global_position()
                    with self._changed:
                        self._count += 1
                        self._changed.notify_all()
        except Exception as e:  # a store gone (closed, unreachable): pages poll again
            log.debug("ui_news_stopped", error=f"{type(e).__name__}: {e}")
            with self._changed:
                self._thread = None
                self._count += 1  # wake the streams: they look once, then wait again
                self._changed.notify_all()
