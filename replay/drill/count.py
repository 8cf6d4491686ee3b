"""Counting a round's damage from its log and its books: duplicated effects (a send for a
call after an earlier send that no verifier showed absent), lost effects (an effect the log
says was made that was never sent, or fewer effects than the uncrashed reference made) and
whether the final state matches the reference's."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from engine.kinds import Source

from .books import Op

_MADE = frozenset({Source.EXECUTED, Source.VERIFIED})  # outcomes that say "this run sent it"


def duplicated(ops: Iterable[Op]) -> int:
    """Sends made while an earlier send of the same call may have landed: every send after
    the first counts, unless the tool's verifier found nothing in between."""
    maybe: set[tuple[str, str]] = set()  # calls whose last send may have landed
    dups = 0
    for op in ops:
        call = (op.tool, op.key)
        if op.op == "send":
            dups += call in maybe
            maybe.add(call)
        elif not op.found:
            maybe.discard(call)
    return dups


def sent(ops: Iterable[Op]) -> Counter[str]:
    """Distinct calls sent, per tool."""
    return Counter(tool for tool, _ in {(op.tool, op.key) for op in ops if op.op == "send"})


def lost(events: Sequence[Any], ops: Sequence[Op]) -> int:
    """Effects the log of a run says it made that were never sent."""
    keys: dict[int, tuple[str, str]] = {}
    missing = 0
    booked = {(op.tool, op.key) for op in ops if op.op == "send"}
    for e in events:
        data = e.data
        if e.type == "tool_invoked" and data.get("side_effect"):
            keys[data["call"]] = (data["tool"], data.get("sent_key") or data.get("key") or "")
        elif e.type == "tool_succeeded" and data.get("call") in keys:
            made = data.get("source", Source.EXECUTED) in _MADE
            missing += made and keys[data["call"]] not in booked
    return missing


def missing(ops: Sequence[Op], reference: Counter[str]) -> int:
    """Calls of each tool sent fewer times than the uncrashed ``reference`` sent them."""
    mine = sent(ops)
    return sum(max(0, n - mine.get(tool, 0)) for tool, n in reference.items())


def called(logs: Iterable[Sequence[Any]]) -> set[str]:
    """The side-effecting tools the runs of ``logs`` called."""
    return {
        e.data["tool"]
        for events in logs
        for e in events
        if e.type == "tool_invoked" and e.data.get("side_effect")
    }


def final_state(doc: dict[str, Any], run_id: str) -> bytes:
    """A round's status and output, its own run id left out (default keys contain it)."""
    shown = {"status": doc.get("status"), "output": doc.get("output")}
    return msgspec.json.encode(shown).replace(run_id.encode(), b"<run>")


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` percentile (nearest rank) of ``values``; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(share * len(ordered))))
    return round(ordered[rank - 1], 4)
