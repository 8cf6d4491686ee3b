"""LangGraph's ``get_delta_channel_history`` read off a folded thread (DeltaChannel):
the parent chain walked once for every channel asked, as LangGraph's InMemorySaver does,
without decoding a single channel value of the ancestors on the way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._lg_thread import Thread, Write

# A typed value (kind, bytes) as LangGraph's serializer reads it.
Loads = Callable[[tuple[str, bytes]], Any]


def delta_history(
    thread: Thread,
    ns: str,
    checkpoint_id: str | None,
    channels: Sequence[str],
    loads: Loads,
    whole: Callable[[str, Any], Any],
) -> dict[str, dict[str, Any]]:
    """Per channel: ``writes`` (the on-path writes, oldest first, the target's own
    excluded) and, if an ancestor stored a value of it, ``seed`` (``whole(channel,
    version)`` rebuilds that value)."""
    saved = thread.checkpoints.get(ns, {})
    cid = checkpoint_id or thread.latest(ns)
    target = saved.get(cid) if cid else None
    collected: dict[str, list[tuple[str, str, Any]]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    at = target.parent_id if target is not None else None
    while at is not None and remaining:
        c = saved.get(at)
        if c is None:
            break
        versions = loads((c.kind, c.checkpoint)).get("channel_versions", {})
        here = {
            ch
            for ch in remaining
            if (v := versions.get(ch)) is not None
            and (stored := thread.values.get((ns, ch, v))) is not None
            and stored.kind != "empty"
        }
        writes: list[Write] = thread.ordered_writes(ns, at)
        for task, ch, kind, data, _ in reversed(writes):
            if ch in remaining:
                collected[ch].append((task, ch, loads((kind, data))))
        for ch in here:
            seeds[ch] = whole(ch, versions[ch])
            remaining.discard(ch)
        at = c.parent_id
    out: dict[str, dict[str, Any]] = {}
    for ch in channels:
        out[ch] = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            out[ch]["seed"] = seeds[ch]
    return out


__all__ = ["delta_history"]
