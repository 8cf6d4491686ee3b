"""The commands that read history (runs, show, timeline, checkpoints, state, context,
diff, verify), move it between stores (export, import) and reseal a store (reseal)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import CorruptData, UsageError
from engine.kinds import RunStatus

from ..output import board_doc, checkpoint_docs, plural, run_doc, state_doc
from . import args, views
from .app import STATUSES, Run, Session, app, run_id_param, session

if TYPE_CHECKING:
    from collections.abc import Iterable

    from engine import RunState
    from engine import events as ev
    from engine.log.state import CheckpointRef


def _beside(s: Session, state: RunState) -> tuple[list[CheckpointRef], dict[str, Any]]:
    """What the log keeps beside a state: the checkpoints up to it, and the run's input."""
    from engine.log.history import started

    marks = s.catalog.checkpoints(state.run_id, state.position)
    return marks, started(s.catalog.store, state.run_id).input


# --- reading ---------------------------------------------------------------------------


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
) -> int:
    """Runs in the store, newest first. Filters and pages read the runs view, brought up to
    date first; with none, or --status alone, the run index answers (the two agree)."""
    s = session(ctx)
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}, not {status!r}")
    now = time.time()
    bounds = (args.moment(since, "--since", now), args.moment(until, "--until", now))
    if bounds[0] is not None and bounds[1] is not None and bounds[1] <= bounds[0]:
        raise UsageError("--until must be later than --since (no run starts in between)")
    page = (args.count(limit, "--limit"), args.count(offset, "--offset"))
    if (agent, parent, *bounds, *page) == (None,) * 6:
        found = s.catalog.runs(status)
        if s.as_json:
            s.out.json_stream(run_doc(r) for r in found)
        else:
            s.out.lines(views.run_rows(found, s.store_name, lineage=s.lineage(found)))
        return 0
    from projections.views.runs import list_runs

    rows = list_runs(
        s.catalog.store,
        status=status,
        agent=agent,
        since=bounds[0],
        until=bounds[1],
        parent=None if parent is None else _parent(s, parent),
        limit=page[0],
        offset=page[1] or 0,
    )
    if s.as_json:
        s.out.json_stream(board_doc(r) for r in rows)
    else:
        s.out.lines(views.board_rows(rows, s.store_name))
    return 0


def _parent(s: Session, given: str) -> str:
    """The run ``--parent`` names: a stored run's id or unique prefix, else the id as given
    (an imported fork's parent need not be in the store) once its form is checked."""
    from engine.log.history import check_run_id

    if not s.catalog.store.run_ids(check_run_id(given, "--parent run id")):
        return given
    return s.catalog.resolve(given)


@app.command()
def show(ctx: typer.Context, run: Run) -> int:
    """A run's summary and current state."""
    s = session(ctx)
    state = s.catalog.state(run)
    children = s.forks(state.run_id)
    owner = s.owner(state.run_id) if state.status == RunStatus.RUNNING else None
    from engine.log.subtree import fork_effects

    stands = fork_effects(s.catalog.store, state.run_id)[0] if state.parent_run_id else []
    marks, given = _beside(s, state)
    if s.as_json:
        doc = state_doc(state, marks, given)
        doc["branches"] = [{"run_id": c, "fork_position": at} for c, at in children]
        doc["owner"] = owner
        doc["standing"] = views.standing_docs(stands)
        s.out.json(doc)
    else:
        s.out.lines(views.state_rows(state, marks, given, children))
        if state.status == RunStatus.RUNNING and not state.imported:
            s.out.lines([views.owner_row(owner)])
        s.out.lines(views.standing_rows(stands, views.FORK_STANDING))
    return 0


@app.command()
def timeline(ctx: typer.Context, run: Run) -> int:
    """Every event with its time, duration, attempts, failures, checkpoints and lineage."""
    s = session(ctx)
    write_timeline(s, s.catalog.resolve(run))
    return 0


def write_timeline(s: Session, run_id: str) -> None:
    """``agentlog timeline``: the run's timeline from the view or the log
    (:func:`replay.timeline.events`)."""
    from .. import timeline as timeline_mod

    render_timeline(s, run_id, timeline_mod.events(s.catalog, run_id))


def render_timeline(s: Session, run_id: str, found: Iterable[ev.Positioned]) -> None:
    """The run's events as JSON lines, or its header and story, given its events. The run's
    state is read first, checking its log as ``show`` does (a damaged run is refused even
    when the view holds it whole), and the whole output is built before any of it is
    written: a refusal prints only the error."""
    from .. import timeline as timeline_mod

    state = s.catalog.state(run_id)
    if s.as_json:
        s.out.json_stream(iter(list(timeline_mod.json_rows(found))))
        return
    s.out.lines([*timeline_mod.header(state, s.forks(run_id)), *timeline_mod.story(found)])


@app.command()
def checkpoints(ctx: typer.Context, run: Run) -> int:
    """A run's named checkpoints."""
    s = session(ctx)
    rid = s.catalog.resolve(run)
    marks = s.catalog.checkpoints(rid)
    if s.as_json:
        s.out.json(checkpoint_docs(marks))
    else:
        s.out.lines(views.checkpoint_rows(rid, marks))
    return 0


@app.command()
def state(
    ctx: typer.Context,
    run: Run,
    at: Annotated[
        str | None, typer.Option("--at", help="A position or a checkpoint name (default: latest).")
    ] = None,
) -> int:
    """The folded state of a run at a position, a checkpoint, or now."""
    s = session(ctx)
    folded = s.catalog.state(run, at=args.position(at, "--at"))
    marks, given = _beside(s, folded)
    if s.as_json:
        s.out.json(state_doc(folded, marks, given))
    else:
        s.out.lines(views.state_rows(folded, marks, given))
    return 0


@app.command()
def context(ctx: typer.Context, run: Run) -> int:
    """The recovery context for an LLM resuming the run, as prompt-ready text."""
    from .. import context as context_mod
    from .. import timeline as timeline_mod

    s = session(ctx)
    rid = s.catalog.resolve(run)
    folded = s.catalog.state(rid)
    text = context_mod.recovery_context(folded, timeline_mod.views(s.catalog, rid))
    if s.as_json:
        s.out.json({"run_id": rid, "status": folded.status, "context": text})
    else:
        s.out.block(text)
    return 0


@app.command()
def diff(
    ctx: typer.Context,
    left: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
    right: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
) -> int:
    """What differs between two runs, or two positions of one (AT: a position or checkpoint)."""
    from .. import diff as diff_mod

    for spec in (left, right):
        run, at = diff_mod.parse_spec(spec)
        args.run_id(run)
        args.position(at, "AT")
    s = session(ctx)
    doc = diff_mod.compare(diff_mod.side(s.catalog, left), diff_mod.side(s.catalog, right))
    if s.as_json:
        s.out.json(doc)
    else:
        s.out.lines(diff_mod.render(doc))
    return 0


@app.command()
def verify(ctx: typer.Context, run: Run) -> int:
    """Replay the log against the current code; exit 2 naming the first call that diverges."""
    s = session(ctx)
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
) -> int:
    """The run's events as JSON Lines, one event a line, hash-chained (and signed with
    --sign: the hash chain alone shows corruption, not forgery). With -o, FILE is replaced
    only once the whole export is written: a failed export leaves it as it was."""
    from .. import transfer

    s = session(ctx)
    lines = transfer.export_lines(s.catalog, run, sign=sign)
    if output is None:
        s.out.raw(lines)
    else:
        from .files import replace_atomically

        replace_atomically(output, lines, "-o")
    try:
        descendants = transfer.left_out(s.catalog, run)
    except CorruptData as e:  # the run exported whole; only its tree is damaged
        sys.stderr.write(f"note: the run's child runs could not be listed: {e}\n")
        return 0
    _say_children_left_out(s.catalog.resolve(run), descendants)
    return 0


def _say_children_left_out(run_id: str, descendants: list[str], shown: int = 10) -> None:
    """On stderr, after the export: the run's child runs are not in it (the export is of
    one run's stream), named so each can be exported too."""
    if not descendants:
        return
    n = len(descendants)
    names = ", ".join(descendants[:shown]) + (f" and {n - shown} more" if n > shown else "")
    sys.stderr.write(
        f"note: the export holds run {run_id} only, not its {plural(n, 'descendant run')} "
        f"(child runs and theirs): {names}; export each with 'agentlog export RUN'\n"
    )


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
    run_id, written = transfer.import_run(
        s.engine, data, source, require_signature=require_signature
    )
    events = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if s.as_json:
        s.out.json({"run_id": run_id, "imported": written, "events": events})
    elif written:
        s.out.line(("imported ", "green"), f"run {run_id} ({events} events)")
        s.out.line(("next: ", "dim"), f"agentlog adopt {run_id}  (before anything runs it)")
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
