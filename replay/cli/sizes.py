"""What ``agentlog storage`` and ``agentlog prune`` print (no Typer here: ``storage`` is
also on the quick path). ``storage --json`` writes ``engine.storage()``; ``prune --json``
writes ``engine.prune(...)``."""

from __future__ import annotations

from typing import Any

from .session import Session

TOP = 10  # the largest runs the text form lists


def size(n: int) -> str:
    """Bytes for a person: ``812 B``, ``14.2 KB``, ``3.1 MB``."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover (the loop returns)


def storage(s: Session) -> int:
    """``agentlog storage``: bytes per agent, the largest runs, what prune would free."""
    doc = s.engine.storage()
    if s.as_json:
        s.out.json(doc)
        return 0
    out = s.out
    out.line(f"{s.store_name}: {size(doc['total_bytes'])} in {len(doc['runs'])} runs")
    for a in doc["agents"]:
        out.line(f"  {size(a['bytes']):>10}  {a['runs']:>6} runs  ", (a["agent"], "bold"))
    if doc["runs"]:
        out.line(("largest runs:", "dim"))
    for r in doc["runs"][:TOP]:
        out.line(f"  {size(r['bytes']):>10}  {r['status']:<10} ", (r["run_id"], "bold"))
    would = doc["prune"]
    out.line(
        f"prune --older-than {would['older_than']} would free {size(would['bytes_freed'])} "
        f"({would['runs']} runs; {would['skipped']} kept for their trees or keys)"
    )
    return 0


def pruned(s: Session, report: dict[str, Any]) -> int:
    """Print what ``agentlog prune`` did (or, with ``--dry-run``, would do)."""
    if s.as_json:
        s.out.json(report)
        return 0
    verb = "would prune" if report["dry_run"] else "pruned"
    s.out.line(
        f"{verb} {report['runs']} runs, {size(report['bytes_freed'])} "
        f"(older than {report['older_than']})"
    )
    for skip in report["skipped_runs"][:TOP]:
        s.out.line(("  kept ", "dim"), (skip["run_id"], "bold"), f": {skip['reason']}")
    if report["skipped"] > TOP:
        s.out.line((f"  ... and {report['skipped'] - TOP} more kept", "dim"))
    return 0
