"""Snapshots of a LangGraph thread's fold, so a fresh process reads the newest checkpoint
of a long thread from one snapshot and the tail after it, not the whole stream.

A snapshot (topic ``langgraph_thread:1``, msgspec msgpack, no pickle) holds what
``get_tuple`` of each namespace's newest checkpoint needs: that checkpoint event, its
pending writes, and the value of each of its channels merged into one stored part (a
history kept as a base and tails is stored whole here). A thread loaded from one is
``partial``: the saver folds the whole stream for anything older (``list``, a named
older checkpoint, forks, prune). The saver that appends keeps a new one once ``EVERY``
events and ``RATIO`` times the last one's bytes (in values, checkpoints and writes) came
after it: the tail a read folds stays short, and snapshots never hold more than half
the bytes the thread's events do (storage stays linear in the thread's length, though a
history is stored whole in each). A snapshot that does not decode is skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import msgspec

from ..events import GraphCheckpointed, GraphValue
from ..events.graphs import Version
from ..store import Snapshot, Store
from ._lg_thread import Thread, value_chain

TOPIC = "langgraph_thread:1"
EVERY = 200  # events at least between two snapshots of a thread
RATIO = 2  # and value bytes at least this times the last snapshot's

# (ns, checkpoint_id, task_id, idx, channel, kind, data, task_path): one pending write.
SavedWrite = tuple[str, str, str, int, str, str, bytes, str]
Versions = Callable[[GraphCheckpointed], dict[str, Version]]
Merge = Callable[[list[GraphValue]], GraphValue]


class ThreadSnapshot(msgspec.Struct, frozen=True):
    """A thread's fold reduced to each namespace's newest checkpoint."""

    position: int
    started_at: float | None
    checkpoints: list[GraphCheckpointed]
    writes: list[SavedWrite]
    values: list[tuple[str, GraphValue]]  # (ns, the value at its version, whole)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ThreadSnapshot)


def take(thread: Thread, versions: Versions, merge: Merge) -> Snapshot:
    """The snapshot of ``thread`` as it stands (its newest checkpoint per namespace)."""
    latest = [saved[max(saved)] for saved in thread.checkpoints.values() if saved]
    values: list[tuple[str, GraphValue]] = []
    writes: list[SavedWrite] = []
    for c in latest:
        for channel, version in versions(c).items():
            part = thread.values.get((c.ns, channel, version))
            if part is not None and part.kind == "empty":
                values.append((c.ns, part))
                continue
            chain = value_chain(thread, c.ns, channel, version)
            if chain:
                values.append((c.ns, chain[0] if len(chain) == 1 else merge(chain)))
        for (task, idx), (_, ch, kind, data, path) in thread.writes.get(
            (c.ns, c.checkpoint_id), {}
        ).items():
            writes.append((c.ns, c.checkpoint_id, task, idx, ch, kind, data, path))
    snap = ThreadSnapshot(thread.position, thread.started_at, latest, writes, values)
    return Snapshot(thread.position, TOPIC, _encoder.encode(snap))


def due(thread: Thread) -> bool:
    """Whether ``thread`` has grown enough since its last snapshot to keep a new one."""
    return thread.position - thread.snapped >= EVERY and thread.grown >= RATIO * thread.snap_bytes


def load(store: Store, stream: uuid.UUID) -> Thread | None:
    """The partial thread the newest snapshot of ``stream`` holds; None if none decodes."""
    for snapshot in store.snapshots(stream, None):
        if snapshot.topic != TOPIC:
            continue  # another reader's snapshot of the same stream
        try:
            snap = _decoder.decode(snapshot.payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if snap.position != snapshot.position:
            continue
        thread = Thread(position=snap.position, started_at=snap.started_at, partial=True)
        thread.snapped, thread.snap_bytes = snap.position, len(snapshot.payload)
        for c in snap.checkpoints:
            thread.checkpoints.setdefault(c.ns, {})[c.checkpoint_id] = c
        for ns, v in snap.values:
            thread.values[(ns, v.channel, v.version)] = v
        for ns, cid, task, idx, ch, kind, data, path in snap.writes:
            thread.writes.setdefault((ns, cid), {})[(task, idx)] = (task, ch, kind, data, path)
        return thread
    return None


__all__ = ["EVERY", "RATIO", "TOPIC", "ThreadSnapshot", "due", "load", "take"]
