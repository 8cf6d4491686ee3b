"""``agentlog locks``: the cross-agent locks held now (name, holder run, fence, expiry).

``--json`` writes a list of ``{"name", "holder", "fence", "expires"}`` (``holder`` the
holding run's id, ``expires`` ISO-8601 UTC, null for a stored time no date can hold),
ordered by name. Expired holds are not listed: they are free to take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ..output import Piece, clock, when
from .app import app, session

if TYPE_CHECKING:
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


@app.command("locks")
def locks_cmd(ctx: typer.Context) -> int:
    """Cross-agent locks held now: the holder run, its fencing token, when the hold
    expires unless renewed, and the lock's name."""
    s = session(ctx)
    held = s.catalog.store.locks.held()
    if s.as_json:
        s.out.json([lock_doc(r) for r in held])
    else:
        s.out.lines(lock_rows(held, s.store_name))
    return 0
