"""The commands that read history (runs, show, timeline, checkpoints, state, context,
diff, verify), move it between stores (export, import) and reseal a store (reseal)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from engine.errors import UsageError

from ..output import plural
from . import bulk, reads, verifying
from .app import STATUSES, Run, Session, app, run_id_param, session
from .reads import render_timeline as render_timeline  # the timeline tests call these
from .reads import write_timeline as write_timeline

# --- reading (the work is in reads.py, which the quick path runs without Typer) --------


@app.command()
def runs(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option("--status", help=f"Only this status: {', '.join(STATUSES)}.")
    ] = None,
    agent: Annotated[
        str | None, typer.Option(metavar="A", help="Only this agent (module:qualname).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="T", help="Started at or after: a span back (24h, 7d) or ISO-8601."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(metavar="T", help="Started before: as --since.")
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option(
            metavar="RUN",
            help="Only child runs and forks of this run (an id or a unique prefix).",
            callback=run_id_param,
        ),
    ] = None,
    limit: Annotated[str | None, typer.Option(metavar="N", help="At most N runs.")] = None,
    offset: Annotated[str | None, typer.Option(metavar="N", help="Skip the first N.")] = None,
    version: Annotated[
        str | None, typer.Option(metavar="V", help="Only runs started by version= V.")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help="The runs that claimed this business key, and each claim's outcome "
            "(alone: no other filter).",
        ),
    ] = None,
    input_contains: Annotated[
        str | None,
        typer.Option(
            "--input-contains",
            metavar="TEXT",
            help="Only runs whose input holds TEXT (secret-named fields redacted first).",
        ),
    ] = None,
) -> int:
    """Runs in the store, newest first. Filters and pages read the runs view, brought up to
    date first; with none, or --status alone, the run index answers (the two agree)."""
    s = session(ctx)
    return reads.runs(
        s, status, agent, since, until, parent, limit, offset, version, key, input_contains
    )


@app.command()
def show(ctx: typer.Context, run: Run) -> int:
    """A run's summary and current state."""
    return reads.show(session(ctx), run)


@app.command()
def timeline(ctx: typer.Context, run: Run) -> int:
    """Every event with its time, duration, attempts, failures, checkpoints and lineage."""
    return reads.timeline(session(ctx), run)


@app.command()
def checkpoints(ctx: typer.Context, run: Run) -> int:
    """A run's named checkpoints."""
    return reads.checkpoints(session(ctx), run)


@app.command()
def state(
    ctx: typer.Context,
    run: Run,
    at: Annotated[
        str | None, typer.Option("--at", help="A position or a checkpoint name (default: latest).")
    ] = None,
) -> int:
    """The folded state of a run at a position, a checkpoint, or now."""
    return reads.state(session(ctx), run, at)


@app.command()
def context(
    ctx: typer.Context,
    run: Run,
    max_tokens: Annotated[
        str | None,
        typer.Option(
            "--max-tokens",
            metavar="N",
            help="Fit it to N tokens: goal, plan, pending work and last observation whole, "
            "large values as blob ids, older events shortened.",
        ),
    ] = None,
) -> int:
    """The recovery context for an LLM resuming the run, as prompt-ready text."""
    return reads.context(session(ctx), run, max_tokens)


@app.command()
def blob(
    ctx: typer.Context,
    blob_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
) -> int:
    """A value stored by its blob id (as a fitted recovery context names it), as JSON."""
    return reads.blob(session(ctx), blob_id)


@app.command()
def diff(
    ctx: typer.Context,
    left: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
    right: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
) -> int:
    """What differs between two runs, or two positions of one (AT: a position or checkpoint)."""
    return reads.diff(session(ctx), left, right)


@app.command()
def verify(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(
            metavar="RUN",
            help="A run id or a unique prefix of one.",
            show_default=False,
            callback=run_id_param,
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every unfinished run (with --status: that status).")
    ] = False,
    status: bulk.Status = None,
    agent: bulk.Agent = None,
    since: bulk.Since = None,
    yes: bulk.Yes = False,
) -> int:
    """Replay the log against the current code; exit 2 naming the first call that diverges.
    With --all, every unfinished run (--agent, --status narrow it): exit 2 naming each run
    that diverges, one a line. With --status (and --yes) but no --all: every run of that
    status, one outcome a line."""
    s = session(ctx)
    if every:
        if run is not None:
            raise UsageError("verify takes a RUN or --all, not both")
        if since is not None or yes:
            raise UsageError("--since and --yes go with --status, not --all")
        return verifying.verify_all(s, agent, status)
    rid = bulk.one_run(run, status, agent, since, yes)
    if rid is None:
        assert status is not None  # (one_run refuses neither)
        return bulk.over(s, "verify", status, agent, since, yes)
    return _verify(s, rid)


def _verify(s: Session, run: str) -> int:
    rid = s.engine.resolve(run)
    r = s.engine.verify(rid)
    if s.as_json:
        s.out.json({"run_id": rid, "status": r.status, "agrees": True})
    else:
        s.out.line(("✓ ", "green"), f"run {rid}: the code agrees with its log ({r.status})")
    return 0


# --- moving runs between stores --------------------------------------------------------


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    run: Run,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
    sign: Annotated[
        bool,
        typer.Option("--sign", help="Add an HMAC chain under $AGENTLOG_EXPORT_KEY."),
    ] = False,
    tree: Annotated[
        bool,
        typer.Option(
            "--tree",
            help="The run and every descendant (child runs and theirs; not forks), parents "
            "first, on one chain: import takes the tree whole or refuses it whole.",
        ),
    ] = False,
) -> int:
    """The run's events as JSON Lines, one event a line, hash-chained (and signed with
    --sign: the hash chain alone shows corruption, not forgery). With -o, FILE is replaced
    only once the whole export is written: a failed export leaves it as it was."""
    return reads.export(session(ctx), run, output, sign, tree)


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="An export file, or - for stdin.")],
    require_signature: Annotated[
        bool,
        typer.Option(
            "--require-signature",
            help="Refuse a file not signed under $AGENTLOG_EXPORT_KEY.",
        ),
    ] = False,
) -> int:
    """Import an exported run as history; refuses a corrupt or conflicting file whole.
    Nothing runs it until `agentlog adopt RUN`."""
    from engine.store.base import MAX_PAYLOAD

    from .. import transfer

    s = session(ctx)
    cap = MAX_PAYLOAD  # the file is read before the store is opened (a refused file creates none)
    if file == "-":
        data, source = transfer.read_export(sys.stdin.buffer, "stdin", cap), "stdin"
    else:
        try:
            with open(file, "rb") as f:
                data = transfer.read_export(f, file, cap)
        except OSError as e:
            raise UsageError(f"cannot read {file}: {e.strerror}") from None
        source = file
    done = transfer.import_file(s.engine, data, source, require_signature=require_signature)
    run_id, runs = done.parsed.run_id, list(done.parsed.runs)
    events = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if s.as_json:
        doc = {"run_id": run_id, "imported": bool(done.written), "events": events}
        s.out.json({**doc, "runs": runs, "written": done.written} if done.parsed.tree else doc)
    elif done.written:
        tree = f" and {plural(len(runs) - 1, 'descendant run')}" if done.parsed.tree else ""
        s.out.line(("imported ", "green"), f"run {run_id}{tree} ({events} events)")
        each = "RUN, for each run," if len(runs) > 1 else run_id
        s.out.line(("next: ", "dim"), f"agentlog adopt {each}  (before anything runs it)")
    else:
        s.out.line(("already present: ", "dim"), f"run {run_id} has this history; nothing to do")
    return 0


@app.command("reseal")
def reseal_cmd(ctx: typer.Context) -> int:
    """Encrypt, in place, the rows of a store written in clear beside encrypted ones
    (before its seal, or by a keyless writer), then seal it. Needs $AGENTLOG_CIPHER_KEY;
    safe to run again or after an interruption."""
    from engine.store.reseal import reseal

    s = session(ctx)
    done = reseal(s.catalog.store)
    if s.as_json:
        s.out.json({"encrypted": done, "sealed": True})
    else:
        s.out.line(("sealed ", "green"), f"{s.store_name}: {plural(done, 'row')} encrypted")
    return 0
