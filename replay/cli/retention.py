"""``agentlog prune`` and ``agentlog storage``: retention from the command line (what
they print: :mod:`.sizes`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import sizes
from .app import app, session


@app.command()
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", metavar="SPAN", help="Finished more than this long ago (30d, 12h)."
        ),
    ],
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            metavar="S",
            help="Only runs of this status (completed, failed, abandoned); repeatable.",
            show_default=False,
        ),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive", metavar="DIR", help="Write each run there first (RUN.jsonl, importable)."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be pruned; write nothing.")
    ] = False,
) -> int:
    """Delete finished runs older than SPAN (whole trees, each run in one transaction);
    never a run still running, paused, queued or waiting, nor one of its tree."""
    from engine.stats import span_seconds  # (the store with it: not at --help)

    span_seconds(older_than, "--older-than", zero=True)  # named as the option, before anything
    s = session(ctx)
    kwargs = {"status": tuple(status)} if status else {}
    report = s.engine.prune(older_than, archive=archive, dry_run=dry_run, **kwargs)
    return sizes.pruned(s, report)


@app.command()
def storage(ctx: typer.Context) -> int:
    """Bytes per agent and per run, the store's total, and what `prune --older-than 30d`
    would free."""
    return sizes.storage(session(ctx))
