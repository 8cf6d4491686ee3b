"""``agentlog locks``: the cross-agent locks held now (name, holder run, fence, expiry);
the listing itself is ``listing.locks``."""

from __future__ import annotations

import typer

from . import listing
from .app import app, session


@app.command("locks")
def locks_cmd(ctx: typer.Context) -> int:
    """Cross-agent locks held now: the holder run, its fencing token, when the hold
    expires unless renewed, and the lock's name."""
    return listing.locks(session(ctx))
