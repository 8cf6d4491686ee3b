"""The store-wide listings, ``agentlog locks`` and ``agentlog schedules``: their JSON
documents, their text lines and the commands' work, free of Typer (``locking`` and
``scheduling`` declare the commands; ``quick`` runs them without loading Typer).

``locks --json`` writes a list of ``{"name", "holder", "fence", "expires"}`` (``holder``
the holding run's id, ``expires`` ISO-8601 UTC, null for a stored time no date can hold),
ordered by name. Expired holds are not listed: they are free to take.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from engine.secrets import redact

from ..output import Piece, clock, when
from .session import Session

if TYPE_CHECKING:
    from engine.runtime.schedules.define import Schedule
    from engine.store.ports import LockRow


def lock_doc(row: LockRow) -> dict[str, Any]:
    """A held lock as ``locks --json`` writes it."""
    return {
        "name": row.name,
        "holder": row.holder,
        "fence": row.fence,
        "expires": when(row.expires_at),
    }


def lock_rows(held: list[LockRow], store: str) -> list[list[Piece]]:
    """The text lines of ``locks``: a header, then one line a lock (its name last, as
    it may be long); every recorded value is escaped when written."""
    if not held:
        return [[(f"no locks held in {store}", "dim")]]
    header = f"{'HOLDER RUN':<32}  {'FENCE':>8}  {'EXPIRES (UTC)':<19}  NAME"
    rows: list[list[Piece]] = [[(header, "bold")]]
    for r in held:
        rows.append(
            [
                f"{r.holder!s:<32}  ",  # str(): a damaged row may hold any type
                (f"{r.fence!s:>8}", "cyan"),
                f"  {clock(r.expires_at, date=True):<19}  ",
                (str(r.name), "bold"),
            ]
        )
    return rows


def locks(s: Session) -> int:
    """``agentlog locks``: the locks held now, by name."""
    held = s.catalog.store.locks.held()
    if s.as_json:
        s.out.json([lock_doc(r) for r in held])
    else:
        s.out.lines(lock_rows(held, s.store_name))
    return 0


def schedule_doc(s: Schedule, now: float) -> dict[str, Any]:
    """A schedule as ``schedules --json`` (and ``schedule --json``) writes it."""
    return {
        "name": s.name,
        "agent": s.agent,
        "cron": s.cadence.cron,
        "every": s.cadence.every,
        "queue": s.queue,
        "catch_up": s.catch_up,
        "input": redact(s.input),
        "next_tick": when(s.next_tick(now)),
        "last_run": s.last_run,
        "created_at": when(s.created_at),
    }


def schedule_rows(found: list[Schedule], now: float, store: str) -> list[list[Piece]]:
    """The text lines of ``schedules``: a header, then one line a schedule."""
    if not found:
        return [[(f"no schedules in {store}", "dim")]]
    header = f"{'NAME':<24}  {'CADENCE':<18}  {'NEXT TICK (UTC)':<19}  {'LAST RUN':<45}  AGENT"
    rows: list[list[Piece]] = [[(header, "bold")]]
    for s in found:
        cadence = s.cadence.cron if s.cadence.cron is not None else f"every {s.cadence.every}s"
        rows.append(
            [
                (f"{s.name:<24}  ", "bold"),
                f"{cadence:<18}  ",
                (f"{clock(s.next_tick(now), date=True):<19}  ", "cyan"),
                f"{s.last_run or '-':<45}  ",
                s.agent,
            ]
        )
    return rows


def schedules(s: Session) -> int:
    """``agentlog schedules``: every schedule, by name (no engine: the listing loads none
    of the runtime)."""
    from engine.runtime.schedules.define import listed

    found = listed(s.catalog.store)
    now = time.time()
    if s.as_json:
        s.out.json([schedule_doc(x, now) for x in found])
    else:
        s.out.lines(schedule_rows(found, now, s.store_name))
    return 0
