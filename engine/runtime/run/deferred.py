"""What rides with a run's next commit: self-resolving outcomes and their keys' commits.

A key's commit waiting here is invisible to the other runs of this process that look at
the key (a sibling run, another call): :meth:`Deferred.flush_others` lets such a reader
have it committed first (``RunContext.flush`` of a key's stream), rather than wait for
the holder's next commit."""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence

from ... import events as ev
from ...errors import RunInterrupt
from ...store import Append, codec

Flush = Callable[[uuid.UUID], None]  # the holder's own flush of a stream's rows

# This process's holders, by the streams of their rows waiting (a key's ledger stream).
_HOLDERS: dict[uuid.UUID, weakref.WeakSet[Deferred]] = {}
_HOLDERS_LOCK = threading.Lock()
_FLUSHING = threading.local()  # a flush of others under way in this thread: no echo back


class Deferred:
    """Outcomes a crash would leave uncertain but self-resolving (``callstate.settle``),
    in call order, with the rows of other streams (the ledger's) committed with them."""

    __slots__ = ("__weakref__", "events", "owner", "rows")

    def __init__(self, owner: Flush | None = None) -> None:
        self.events: list[ev.Event] = []
        self.rows: list[Append] = []
        self.owner = owner  # how another run of this process has them committed now

    def add(self, event: ev.Event, rows: Sequence[Append] = ()) -> None:
        self.events.append(event)
        self.rows.extend(rows)
        if rows and self.owner is not None:
            with _HOLDERS_LOCK:
                for a in rows:
                    _HOLDERS.setdefault(a.stream, weakref.WeakSet()).add(self)

    def clear(self) -> None:
        codec.let_go(self.events)  # the payloads not appended (held: ``codec.kept``)
        if self.rows and self.owner is not None:
            with _HOLDERS_LOCK:
                for a in self.rows:
                    held = _HOLDERS.get(a.stream)
                    if held is not None:
                        held.discard(self)
                        if not held:
                            del _HOLDERS[a.stream]
        self.events, self.rows = [], []

    def touches(self, stream: uuid.UUID) -> bool:
        """Whether a row waiting here is in ``stream`` (a key's, before it is read)."""
        return any(a.stream == stream for a in self.rows)

    def flush_others(self, stream: uuid.UUID | None) -> None:
        """Have every other holder in this process of a row in ``stream`` commit it now
        (best effort: a holder that cannot, stopped or fenced out, keeps its own error)."""
        if stream is None or getattr(_FLUSHING, "on", False):
            return
        with _HOLDERS_LOCK:
            others = [d for d in _HOLDERS.get(stream, ()) if d is not self]
        _FLUSHING.on = True
        try:
            for d in others:
                with contextlib.suppress(Exception, RunInterrupt):
                    d.owner(stream)  # type: ignore[misc]
        finally:
            _FLUSHING.on = False

    def lost(self) -> str:
        """The outcomes waiting here, named for a message: ``tool (call n)``, ..."""
        done = [e for e in self.events if isinstance(e, ev.ToolSucceeded)]
        return ", ".join(f"{e.tool} (call {e.call})" for e in done)
