"""``agentlog verify --all``: every unfinished run replayed against the current code,
each divergent run named on a line of its own (exit 2), or none (exit 0)."""

from __future__ import annotations

from engine.errors import UsageError

from .session import STATUSES, Session


def verify_all(s: Session, agent: str | None, status: str | None) -> int:
    """The report of ``engine.verify_all``: exit 0 if no run diverges, else 2."""
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}, not {status!r}")
    found = s.engine.verify_all(agent=agent, status=status)
    if s.as_json:
        s.out.json(found)
    elif not found:
        s.out.line(("✓ ", "green"), "every run checked agrees with the code")
    else:
        for d in found:
            s.out.line(("✗ ", "red"), f"run {d['run_id']}: {d['divergence']}")
    return 2 if found else 0
