"""What a fork's own first records say, for ``rewind``: the values it edited (and who
edited them) and, for a dry run, each side effect it would have sent."""

from __future__ import annotations

from typing import Any

from ..forkdoc import fork_doc
from ..output import Piece, brief

__all__ = ["fork_doc", "fork_rows"]


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
