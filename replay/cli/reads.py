"""The reading commands' work, free of Typer (runs, show, timeline, checkpoints, state,
context, diff, export): ``reading`` declares them as commands, ``quick`` runs them without
loading Typer. Each takes the session and the command's arguments as given."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Any

from engine.errors import AgentlogError, CorruptData, UsageError
from engine.kinds import RunStatus

from ..output import board_doc, checkpoint_docs, plural, run_doc, state_doc
from . import args, searching, views
from .session import STATUSES, Session

if TYPE_CHECKING:
    from collections.abc import Iterable

    from engine import RunState, RunSummary
    from engine import events as ev
    from engine.log.state import CheckpointRef


def _beside(s: Session, state: RunState) -> tuple[list[CheckpointRef], dict[str, Any]]:
    """What the log keeps beside a state: the checkpoints up to it, and the run's input."""
    from engine.log.history import started

    marks = s.catalog.checkpoints(state.run_id, state.position)
    return marks, started(s.catalog.store, state.run_id).input


def runs(
    s: Session,
    status: str | None = None,
    agent: str | None = None,
    since: str | None = None,
    until: str | None = None,
    parent: str | None = None,
    limit: str | None = None,
    offset: str | None = None,
    version: str | None = None,
    key: str | None = None,
    input_contains: str | None = None,
) -> int:
    """``agentlog runs``: the run index, or the runs view for filters and pages (each
    run's ``version`` in --json is the view's); narrowed further by the filters that read
    each run's log (``searching.narrowing``); or, with ``key``, the runs that claimed that
    business key."""
    if key is not None:
        others = (status, agent, since, until, parent, limit, offset, version, input_contains)
        return searching.key_runs(s, key, others)
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}, not {status!r}")
    now = time.time()
    bounds = (args.moment(since, "--since", now), args.moment(until, "--until", now))
    if bounds[0] is not None and bounds[1] is not None and bounds[1] <= bounds[0]:
        raise UsageError("--until must be later than --since (no run starts in between)")
    page = (args.count(limit, "--limit"), args.count(offset, "--offset"))
    if version is not None and not version.strip():
        raise UsageError("--version needs a version (the agent's version=)")
    narrow = searching.narrowing(s, input_contains)
    if (agent, parent, version, *bounds, *page) == (None,) * 7:
        found = [r for r in s.catalog.runs(status) if searching.kept(narrow, r.run_id)]
        if s.as_json:
            known = _versions(s, found)
            s.out.json_stream(run_doc(r, known.get(r.run_id)) for r in found)
        else:
            s.out.lines(views.run_rows(found, s.store_name, bool(narrow)))
        searching.say_damaged(narrow)
        return 0
    from projections.views.runs import list_runs

    rows = list_runs(
        s.catalog.store,
        status=status,
        agent=agent,
        since=bounds[0],
        until=bounds[1],
        parent=None if parent is None else _parent(s, parent),
        limit=None if narrow else page[0],
        offset=0 if narrow else page[1] or 0,
        version=version,
    )
    if narrow:
        rows = searching.paged([r for r in rows if searching.kept(narrow, r.run_id)], *page)
    if s.as_json:
        s.out.json_stream(board_doc(r) for r in rows)
    else:
        s.out.lines(views.board_rows(rows, s.store_name))
    searching.say_damaged(narrow)
    return 0


def _versions(s: Session, found: list[RunSummary]) -> dict[str, str | None]:
    """The ``version=`` each listed run recorded: from the runs view, brought up to date;
    when a damaged log stops the view, from each run's own ``agent_started`` (None where
    that cannot be read either), so the index's listing still lists every run."""
    if not found:
        return {}
    from projections.views.runs import list_runs

    try:
        return {r.run_id: r.version for r in list_runs(s.catalog.store)}
    except AgentlogError:
        from engine.log.history import started

        known: dict[str, str | None] = {}
        for r in found:
            with contextlib.suppress(AgentlogError):
                known[r.run_id] = started(s.catalog.store, r.run_id).version
        return known


def _parent(s: Session, given: str) -> str:
    """The run ``--parent`` names: a stored run's id or unique prefix, else the id as given
    (an imported fork's parent need not be in the store) once its form is checked."""
    from engine.log.history import check_run_id

    if not s.catalog.store.run_ids(check_run_id(given, "--parent run id")):
        return given
    return s.catalog.resolve(given)


def show(s: Session, run: str) -> int:
    """``agentlog show``: the run's summary, current state, forks, owner and standing effects."""
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


def timeline(s: Session, run: str) -> int:
    """``agentlog timeline``: the run's every event, as a story or JSON lines."""
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


def checkpoints(s: Session, run: str) -> int:
    """``agentlog checkpoints``: the run's named checkpoints."""
    rid = s.catalog.resolve(run)
    marks = s.catalog.checkpoints(rid)
    if s.as_json:
        s.out.json(checkpoint_docs(marks))
    else:
        s.out.lines(views.checkpoint_rows(rid, marks))
    return 0


def state(s: Session, run: str, at: str | None = None) -> int:
    """``agentlog state``: the folded state at ``at`` (a position or checkpoint) or now."""
    folded = s.catalog.state(run, at=args.position(at, "--at"))
    marks, given = _beside(s, folded)
    if s.as_json:
        s.out.json(state_doc(folded, marks, given))
    else:
        s.out.lines(views.state_rows(folded, marks, given))
    return 0


def context(s: Session, run: str, max_tokens: str | None = None) -> int:
    """``agentlog context``: the recovery context, as prompt-ready text; with
    ``--max-tokens N``, fitted to N tokens (``engine.context``)."""
    from .. import context as context_mod
    from .. import timeline as timeline_mod

    budget = args.count(max_tokens, "--max-tokens")
    if budget == 0:
        raise UsageError("--max-tokens takes a whole number above 0, not 0")
    rid = s.catalog.resolve(run)
    folded = s.catalog.state(rid)
    if budget is None:
        text = context_mod.recovery_context(folded, timeline_mod.views(s.catalog, rid))
    else:
        text = s.catalog.context(rid, max_tokens=budget)
    if s.as_json:
        s.out.json({"run_id": rid, "status": folded.status, "context": text})
    else:
        s.out.block(text)
    return 0


def blob(s: Session, blob_id: str) -> int:
    """``agentlog blob``: the value a recovery context stored as ``blob_id``, as JSON."""
    s.out.json(s.catalog.blob(blob_id))
    return 0


def diff(s: Session, left: str, right: str) -> int:
    """``agentlog diff``: what differs between two runs, or two positions (``RUN@AT``)."""
    from .. import diff as diff_mod

    for spec in (left, right):
        run, at = diff_mod.parse_spec(spec)
        args.run_id(run)
        args.position(at, "AT")
    doc = diff_mod.compare(diff_mod.side(s.catalog, left), diff_mod.side(s.catalog, right))
    if s.as_json:
        s.out.json(doc)
    else:
        s.out.lines(diff_mod.render(doc))
    return 0


def export(
    s: Session, run: str, output: str | None = None, sign: bool = False, tree: bool = False
) -> int:
    """``agentlog export``: the run's events (with ``tree``, its descendants' too) as
    hash-chained JSON Lines, on stdout or to ``output`` (replaced only once the whole
    export is written)."""
    from .. import transfer

    lines = transfer.export_lines(s.catalog, run, sign=sign, tree=tree)
    if output is None:
        s.out.raw(lines)
    else:
        from .files import replace_atomically

        replace_atomically(output, lines, "-o")
    if tree:
        return 0
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
        f"(child runs and theirs): {names}; export them all with 'agentlog export RUN --tree'\n"
    )
