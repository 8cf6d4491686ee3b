"""The runs view, the status board: one row per run, and the queries that read it.

A row's status, position, times, agent and parent follow the run's whole stream exactly
as the engine's inline run index does (``RunWriter.index_row`` of the fold of every
event, a fork's copies of its parent's events included: they are the fork's replayed
state). Counts of work (tool calls, retries, failures) skip those copies: the parent did
that work. Plan progress includes them, since a fork carries on its parent's plan. The
log holds no tags, so the board has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from msgspec.structs import replace

from engine import events as ev
from engine.kinds import RunStatus
from engine.log.state import Root, lineage_kind, lineage_of, next_status
from engine.stats import RunCounts
from engine.store import Store
from engine.store.ports import Column, ViewQuery

from ..fold import Envelope, Projection, RowDecoder, RunFacts
from ..runner import Runner


class RunBoardRow(msgspec.Struct, frozen=True, omit_defaults=True):
    """One run on the board. ``lineage`` is ``fork`` (rewound from ``parent_run_id`` at
    ``fork_position``, its parent's effects after it handled per ``effects``), ``child``
    (a parent but no fork position) or None. ``steps_done`` counts steps completed
    without error since the latest plan; ``attempts`` is ``tool_calls + retries``."""

    run_id: str
    agent: str
    status: str = RunStatus.NEW
    started_at: float = 0.0
    updated_at: float = 0.0
    position: int = 0
    parent_run_id: str | None = None
    lineage: str | None = None
    fork_position: int | None = None
    effects: str | None = None
    inherited: int = 0
    step: str | None = None  # the step started and not completed yet
    steps_planned: int = 0
    steps_done: int = 0
    tool_calls: int = 0
    retries: int = 0
    failures: int = 0
    attempts: int = 0
    resumes: int = 0
    owner: str | None = None  # the last resuming or adopting engine's owner id
    imported: bool = False  # imported and not adopted since
    last_event: str = ""  # its type; updated_at is its time
    version: str | None = None  # its agent's version= when it started (None: undeclared)


def _started(row: RunBoardRow, e: ev.AgentStarted) -> RunBoardRow:
    found = lineage_of(e)
    lineage = None if isinstance(found, Root) else lineage_kind(found)
    return replace(
        row,
        agent=e.agent,
        started_at=e.at,
        parent_run_id=e.parent_run_id,
        lineage=lineage,
        fork_position=e.fork_position,
        effects=e.effects,
        inherited=e.inherited,
        version=e.version,
    )


def _state(row: RunBoardRow, e: ev.Event) -> RunBoardRow:
    """What every event of the stream, copies included, does to the row."""
    match e:
        case ev.AgentStarted():
            return _started(row, e)
        case ev.AgentResumed():
            return replace(row, resumes=row.resumes + 1, owner=e.owner or row.owner)
        case ev.RunImported():
            return replace(row, imported=True)
        case ev.RunAdopted():
            return replace(row, imported=False, agent=e.agent, owner=e.owner or row.owner)
        case ev.PlanCreated():
            return replace(row, steps_planned=len(e.steps), steps_done=0)
        case ev.StepStarted():
            return replace(row, step=e.name)
        case ev.StepCompleted():
            done = row.steps_done + (e.error is None)
            return replace(row, step=None if row.step == e.name else row.step, steps_done=done)
    return row


def _work(row: RunBoardRow, e: ev.Event) -> RunBoardRow:
    """What the run's own events (not a fork's copies) add to its counts of work."""
    match e:
        case ev.ToolInvoked():
            return replace(row, tool_calls=row.tool_calls + 1, attempts=row.attempts + 1)
        case ev.RetryScheduled():
            return replace(row, retries=row.retries + 1, attempts=row.attempts + 1)
        case ev.ToolFailed():
            return replace(row, failures=row.failures + 1)
    return row


def _fresh(run: RunFacts) -> RunBoardRow:
    return RunBoardRow(run.run_id, run.agent, parent_run_id=run.parent_run_id)


class View(Projection[RunBoardRow]):
    """The status board, keyed by run id."""

    name = "runs"
    version = "2"
    row = RunBoardRow
    columns = (
        Column("agent"),
        Column("version"),
        Column("status"),
        Column("started_at", "real"),
        Column("updated_at", "real"),
        Column("parent_run_id"),
    )

    def keys(self, env: Envelope) -> Sequence[str]:
        return () if env.run is None else (env.run.run_id,)

    def apply(
        self, rows: Mapping[str, RunBoardRow | None], env: Envelope
    ) -> Mapping[str, RunBoardRow | None]:
        if env.run is None:  # keys named no row
            return {}
        e = env.event
        row = rows.get(env.run.run_id) or _fresh(env.run)
        row = replace(
            _state(row, e),
            status=next_status(row.status, e),
            position=env.position,
            updated_at=e.at,
            last_event=str(e.__struct_config__.tag),
        )
        if not env.copied:
            row = _work(row, e)
        return {env.run.run_id: row}


# --- reading the board ---------------------------------------------------------------

_DECODE = RowDecoder(View.name, RunBoardRow)


def caught_up(store: Store) -> None:
    """Bring the runs view up to the log's head as it is now (read-your-writes)."""
    Runner(store, [View()]).catch_up([View.name])


class RunFilter(msgspec.Struct, frozen=True):
    """Which runs to read: of one status, agent, parent and version, started at or after
    ``since`` and before ``until`` (epoch seconds), a page of them."""

    status: str | None = None
    agent: str | None = None
    since: float | None = None
    until: float | None = None
    parent: str | None = None
    limit: int | None = None
    offset: int = 0
    version: str | None = None

    def query(self) -> ViewQuery:
        """The view query, newest first (by start time, then run id)."""
        named = (
            ("status", self.status),
            ("agent", self.agent),
            ("parent_run_id", self.parent),
            ("version", self.version),
        )
        return ViewQuery(
            equal={k: v for k, v in named if v is not None},
            at_least={} if self.since is None else {"started_at": self.since},
            below={} if self.until is None else {"started_at": self.until},
            order_by="started_at",
            limit=self.limit,
            offset=self.offset,
        )


def query(store: Store, where: RunFilter) -> list[RunBoardRow]:
    """The rows ``where`` picks from the view as it stands, newest first."""
    return [_DECODE(body) for body in store.views.query(View.table(), where.query())]


def list_runs(
    store: Store,
    *,
    status: str | None = None,
    agent: str | None = None,
    since: float | None = None,
    until: float | None = None,
    parent: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    version: str | None = None,
) -> list[RunBoardRow]:
    """The runs :class:`RunFilter` picks, newest first, after bringing the view up to date:
    every run committed before the call is there."""
    caught_up(store)
    return query(store, RunFilter(status, agent, since, until, parent, limit, offset, version))


def rows_of(store: Store, run_ids: Sequence[str]) -> list[RunBoardRow]:
    """The rows of ``run_ids`` in that order (a run the view lacks: left out), after
    bringing the view up to date."""
    caught_up(store)
    found = store.views.rows(View.table(), list(dict.fromkeys(run_ids)))
    return [_DECODE(found[r]) for r in dict.fromkeys(run_ids) if r in found]


def counts(
    store: Store, since: float | None, agent: str | None, *, catch_up: bool = True
) -> RunCounts:
    """Runs started at or after ``since`` (epoch seconds; None: all), of ``agent`` (None:
    every agent): their total and how many are in each status (after bringing the view
    up to date, unless the caller just did)."""
    if catch_up:
        caught_up(store)
    by_status: dict[str, int] = {}
    for row in query(store, RunFilter(since=since, agent=agent)):
        by_status[row.status] = by_status.get(row.status, 0) + 1
    return RunCounts(total=sum(by_status.values()), by_status=by_status)
