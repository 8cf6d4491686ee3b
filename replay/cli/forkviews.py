"""What a fork's own first records say, for ``rewind``: the values it edited (and who
edited them) and, for a dry run, each side effect it would have sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.runtime.run.results import EventView

from ..output import Piece, brief


def fork_doc(events: Sequence[EventView]) -> dict[str, Any]:
    """``{"dry_run", "edits", "edited_by", "would_send"}`` of a fork's log (its own
    records: not those it copied from its parent, a fork's edits among them)."""
    edits: list[dict[str, Any]] = []
    by, dry, would = None, False, []
    copied = 1 + int(events[0].data.get("inherited") or 0) if events else 0
    for e in events[copied:]:
        if e.type == "fork_edited":
            edits += e.data.get("edits", [])
            by = e.data.get("by")
        elif e.type == "dry_run_started":
            dry = True
        elif e.type == "would_send":
            d = e.data
            would.append({k: d.get(k) for k in ("call", "tool", "args", "key", "stopped")})
    return {"dry_run": dry, "edits": edits, "edited_by": by, "would_send": would}


def fork_rows(doc: dict[str, Any]) -> list[list[Piece]]:
    """The fork's edits and would-be effects, one line each."""
    rows: list[list[Piece]] = []
    for x in doc["edits"]:
        where = f"call {x['call']}, position {x['position']}"
        rows.append([("edited", "bold yellow"), f" {x['kind']} {x['name']!r} ({where})"])
    if doc["edits"]:
        rows.append([("  by ", "dim"), str(doc["edited_by"])])
    if doc["dry_run"]:
        rows.append([("dry run", "bold cyan"), ": no side-effecting tool is called"])
    for w in doc["would_send"]:
        stop = " (the fork stopped here)" if w["stopped"] else ""
        args = brief(w["args"], 120)
        rows.append([f"  would send call {w['call']} {w['tool']} (key {w['key']}) ", args, stop])
    return rows
