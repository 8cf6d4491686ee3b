"""What rides with a run's next commit: self-resolving outcomes and their keys' commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ... import events as ev
from ...store import Append, codec


class Deferred:
    """Outcomes a crash would leave uncertain but self-resolving (``callstate.settle``),
    in call order, with the rows of other streams (the ledger's) committed with them."""

    __slots__ = ("events", "rows")

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.rows: list[Append] = []

    def add(self, event: ev.Event, rows: Sequence[Append] = ()) -> None:
        self.events.append(event)
        self.rows.extend(rows)

    def clear(self) -> None:
        codec.let_go(self.events)  # the payloads not appended (held: ``codec.kept``)
        self.events, self.rows = [], []

    def touches(self, stream: uuid.UUID) -> bool:
        """Whether a row waiting here is in ``stream`` (a key's, before it is read)."""
        return any(a.stream == stream for a in self.rows)

    def lost(self) -> str:
        """The outcomes waiting here, named for a message: ``tool (call n)``, ..."""
        done = [e for e in self.events if isinstance(e, ev.ToolSucceeded)]
        return ", ".join(f"{e.tool} (call {e.call})" for e in done)
