"""What a fork's own first records say: the values it edited (and who edited them) and,
for a dry run, each side effect it would have sent (``rewind``'s report and the web UI's
page of a fork read it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.runtime.run.results import EventView


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
