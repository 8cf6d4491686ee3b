"""The reading pages: the runs board, a run, its state at a position, a diff, the stats.
Each reads what the CLI's matching command reads (the runs view, ``state_doc``, the
timeline's story, ``replay.diff``, ``engine.stats``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.responses import HTMLResponse

from engine.errors import AgentlogError
from engine.kinds import SUSPENDED
from engine.log.history import started
from projections.views.runs import counts, list_runs, rows_of

from .. import diff as diff_mod
from ..output import board_doc, state_doc
from . import live, params, runpage
from .render import error, lines, page

if TYPE_CHECKING:
    from starlette.requests import Request

    from engine import Engine
    from projections.views.runs import RunBoardRow

BOARD_PAGE = 50


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def board(request: Request) -> HTMLResponse:
    """``/``: the runs view, filtered by ``status``, ``agent``, ``since``, ``until``,
    ``parent`` (or ``key``: the runs that claimed that business key, oldest claim
    first), a page of ``limit`` from ``offset``; the counts by status beside it."""
    q = request.query_params
    engine = _engine(request)
    status = params.status(q.get("status"))
    agent = params.text(q.get("agent"), "agent")
    since = params.moment(q.get("since"), "since")
    until = params.moment(q.get("until"), "until")
    parent = params.text(q.get("parent"), "parent")
    limit = min(params.count(q.get("limit"), "limit", BOARD_PAGE), 1000) or BOARD_PAGE
    offset = params.count(q.get("offset"), "offset", 0)
    if parent is not None:  # a unique prefix names the parent, as ``runs --parent`` takes
        found = engine.store.run_ids(parent)
        parent = found[0] if len(found) == 1 else parent
    seen = live.fingerprint(engine, None)  # before the read: a later change is news
    key = params.key(q.get("key"), (status, agent, since, until, parent))
    rows = (
        key_rows(engine, key, limit + 1, offset)
        if key is not None
        else list_runs(
            engine.store,
            status=status,
            agent=agent,
            since=since,
            until=until,
            parent=parent,
            limit=limit + 1,
            offset=offset,
        )
    )
    tally = counts(engine.store, since, agent, catch_up=False)
    filters = {k: q.get(k, "") for k in ("status", "agent", "since", "until", "parent", "key")}
    return page(
        request,
        "board.html",
        rows=[_waiting(engine, board_doc(r)) for r in rows[:limit]],
        more=len(rows) > limit,
        limit=limit,
        offset=offset,
        filters=filters,
        counts=tally,
        statuses=params.STATUSES,
        live="",
        seen=seen,
    )


def key_rows(engine: Engine, key: str, limit: int, offset: int) -> list[RunBoardRow]:
    """The runs that claimed the business key ``key`` (``Catalog.key_claims``), each
    once, oldest claim first: ``limit`` of them from ``offset``."""
    claimants = list(dict.fromkeys(c.run_id for c in engine.key_claims(key)))
    return rows_of(engine.store, claimants[offset : offset + limit])


def _waiting(engine: Engine, doc: dict[str, Any]) -> dict[str, Any]:
    """A board row with what a suspended run waits on (its state says; the runs view
    keeps no such column), None for the others or a log that cannot be read."""
    doc["waiting"] = None
    if doc["status"] in SUSPENDED:
        with contextlib.suppress(AgentlogError):
            doc["waiting"] = engine.state(doc["run_id"]).waiting
    return doc


def run(request: Request) -> HTMLResponse:
    """``/runs/{run_id}``: the run's state, timeline page (``page``, ``type`` filters),
    tree, forks and the actions its status allows."""
    q = request.query_params
    types = frozenset(t for t in (params.text(v, "type") for v in q.getlist("type")) if t)
    number = params.count(q.get("page"), "page", 0) or None
    engine = _engine(request)
    rid = engine.resolve(request.path_params["run_id"])
    seen = live.fingerprint(engine, rid)  # before the read: a later change is news
    found = runpage.read(engine, request.app.state.stories, rid, types, number)
    return page(request, "run.html", run=found, live=rid, seen=seen)


def state(request: Request) -> HTMLResponse:
    """``/runs/{run_id}/state?at=POSITION``: the folded state there (a position or a
    checkpoint name; none: now), as ``agentlog state --json`` shows it."""
    engine = _engine(request)
    rid = engine.resolve(request.path_params["run_id"])
    at = params.position(request.query_params.get("at"))
    latest = engine.state(rid)
    folded = engine.state(rid, at=at)
    marks = engine.checkpoints(rid, folded.position)
    doc = state_doc(folded, marks, started(engine.store, rid).input)
    return page(request, "state.html", run_id=rid, doc=doc, at=folded.position, latest=latest)


def diff(request: Request) -> HTMLResponse:
    """``/diff?a=RUN[@AT]&b=RUN[@AT]``: ``agentlog diff`` of the two sides (the form
    alone when they are not both given)."""
    q = request.query_params
    a, b = params.text(q.get("a"), "a"), params.text(q.get("b"), "b")
    if a is None or b is None:
        return page(request, "diff.html", a=a or "", b=b or "", rows=None, doc=None)
    engine = _engine(request)
    for spec in (a, b):
        params.position(diff_mod.parse_spec(spec)[1], "AT")
    doc = diff_mod.compare(diff_mod.side(engine, a), diff_mod.side(engine, b))
    rows = lines(diff_mod.render(doc))
    return page(request, "diff.html", a=a, b=b, rows=rows, doc=doc)


def stats(request: Request) -> HTMLResponse:
    """``/stats?since=24h&agent=``: ``agentlog stats``' figures, with bars drawn here."""
    q = request.query_params
    since = params.text(q.get("since"), "since")
    agent = params.text(q.get("agent"), "agent")
    params.moment(since, "since")
    figures = _engine(request).stats(since=since, agent=agent)
    doc = msgspec.to_builtins(figures)
    worst = max([t["p95_ms"] or 0 for t in doc["tools"]] + [1])
    return page(request, "stats.html", doc=doc, since=since or "", agent=agent or "", worst=worst)


def not_found(request: Request, exc: Exception) -> HTMLResponse:
    return error(request, 404, f"no page at {request.url.path}")
