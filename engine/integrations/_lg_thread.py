"""One LangGraph thread folded from its run's events: its checkpoints by namespace, their
pending writes, and the channel values by version (pure; no LangGraph import).

Values stay typed bytes here; :mod:`engine.integrations.langgraph` decodes them with
LangGraph's serializer. A value stored as a tail (``GraphValue.base``) is rebuilt by
:func:`value_chain`: its base's chain, then its own tail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import Event, GraphCheckpointed, GraphForgotten, GraphValue, GraphWritten
from ..events.graphs import Version

# (task_id, channel, kind, data, task_path): one pending write, as put_writes gave it.
Write = tuple[str, str, str, bytes, str]
# The indices LangGraph gives its special writes (error, scheduled, interrupt, resume):
# negative, so a later write of the same kind replaces the earlier one.
SPECIAL = -1


@dataclass
class Thread:
    """What a thread holds after the events folded so far (``position``: the last)."""

    position: int = 0
    started_at: float | None = None
    checkpoints: dict[str, dict[str, GraphCheckpointed]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)
    values: dict[tuple[str, str, Version], GraphValue] = field(default_factory=dict)
    # The newest list value this process put per (ns, channel), as (version, a copy):
    # what the next put of that channel may extend (never folded from the log).
    lists: dict[tuple[str, str], tuple[Version, list[Any]]] = field(default_factory=dict)
    # The events since the thread was last deleted whole: what copy_thread copies.
    live: list[Event] = field(default_factory=list)
    # Loaded from a snapshot (_lg_snap): only each namespace's newest checkpoint and its
    # values; ``stale`` once a partial forget came after it (the newest may be gone).
    partial: bool = False
    stale: bool = False
    snapped: int = 0  # the position of the thread's newest snapshot
    snap_bytes: int = 0  # its size, and the value bytes folded since (_lg_snap.due)
    grown: int = 0

    def fold(self, position: int, event: Event) -> None:
        """Take one event of the thread's stream (an event of no thread only moves on)."""
        self.position = position
        if self.started_at is None:
            self.started_at = event.at
        if isinstance(event, GraphCheckpointed):
            self._checkpointed(event)
            self.grown += len(event.checkpoint) + sum(len(v.data) for v in event.values)
        elif isinstance(event, GraphWritten):
            self._written(event)
            self.grown += sum(len(w.data) for w in event.writes)
        elif isinstance(event, GraphForgotten):
            self._forgotten(event)
        else:
            return
        self.live.append(event)

    def _checkpointed(self, e: GraphCheckpointed) -> None:
        self.checkpoints.setdefault(e.ns, {})[e.checkpoint_id] = e
        for v in e.values:
            self.values[(e.ns, v.channel, v.version)] = v

    def _written(self, e: GraphWritten) -> None:
        stored = self.writes.setdefault((e.ns, e.checkpoint_id), {})
        for w in e.writes:
            key = (e.task_id, w.idx)
            if w.idx >= 0 and key in stored:
                continue  # a task's regular write is kept once, as LangGraph's savers do
            stored[key] = (e.task_id, w.channel, w.kind, w.data, e.task_path)

    def _forgotten(self, e: GraphForgotten) -> None:
        if not e.runs and not e.pruned:  # the whole thread
            self.checkpoints.clear()
            self.writes.clear()
            self.values.clear()
            self.lists.clear()
            self.live.clear()
            self.partial = self.stale = False  # nothing older is left to miss
            return
        self.stale = self.partial
        kept = {(k.ns, k.checkpoint_id) for k in e.keep}
        for ns, saved in self.checkpoints.items():
            for cid, c in list(saved.items()):
                gone = (ns, cid) not in kept if e.pruned else c.run in e.runs
                if gone:
                    del saved[cid]
                    self.writes.pop((ns, cid), None)

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[Write]:
        """The checkpoint's pending writes in LangGraph's order (task path, task, index)."""
        stored = self.writes.get((ns, checkpoint_id), {})
        return [stored[k] for k in sorted(stored, key=lambda k: (stored[k][4], *k))]

    def latest(self, ns: str) -> str | None:
        """The newest checkpoint id of ``ns`` (ids are time-ordered uuid6), None if none."""
        saved = self.checkpoints.get(ns)
        return max(saved) if saved else None


def value_chain(thread: Thread, ns: str, channel: str, version: Version) -> list[GraphValue]:
    """The stored parts of ``channel``'s value at ``version``, oldest first: a whole
    value, then the tails that extend it; empty if none is stored (or it was "empty")."""
    chain: list[GraphValue] = []
    at: Version | None = version
    while at is not None:
        part = thread.values.get((ns, channel, at))
        if part is None:
            return []
        chain.append(part)
        at = part.base
    chain.reverse()
    return [] if chain[0].kind == "empty" else chain


def resolves(thread: Thread, ns: str, versions: dict[str, Version]) -> bool:
    """Whether every channel value at ``versions`` is held whole by ``thread``."""
    for channel, version in versions.items():
        at: Version | None = version
        while at is not None:
            part = thread.values.get((ns, channel, at))
            if part is None:
                return False
            at = part.base
    return True


def extends(previous: list[Any], value: Any) -> bool:
    """Whether ``value`` is ``previous`` with items appended (both plain lists)."""
    return type(value) is list and len(value) > len(previous) and value[: len(previous)] == previous


__all__ = ["Thread", "Write", "extends", "resolves", "value_chain"]
