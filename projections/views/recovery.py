"""The recovery view: one row per run with what its crashes cost and how it ended, from
which ``summarize`` computes the operator's recovery figures (``engine.stats().recovery``).

A **crash** is an ``agent_resumed`` that follows the run while it was running: its owner
died (or lost its lease) mid-run and another execution took it over. A resume after an
answer (``human_input_provided`` just before) or an adoption (``run_adopted``: an
imported run taken on), after a failure (``agent_failed``) or of a paused run is no
crash. Only what the log records counts: an owner that dies again before its resumed
execution writes anything leaves no trace until a resume that writes.
Per crash: the time to recover (RTO) is the resume's time minus that of the run's last
event before it, and the work lost (RPO) the calls in flight at the crash whose intent
was committed (an intent with no outcome: a side effect's, or a read's whose intent rode
an earlier commit; a read whose intent was to ride with its outcome left no trace, and
its redoing is not counted); of those, the ones whose outcome after the resume came from
running the tool again (not from a verifier, the ledger or a person) are counted as
re-executed. A fork's or child's copies of its parent's events are history, not work:
skipped. Each crash's own figures are kept for ``projections.objectives``: its time to
recover, its resume's from its start to its first commit, and the tail past the newest
snapshot that resume folded again (``agent_resumed``'s ``recovery_s`` and ``replayed``),
for its latest ``SAMPLES`` crashes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from msgspec.structs import replace

from engine import events as ev
from engine.kinds import SETTLED, RunStatus, Source
from engine.log.effects import answered
from engine.log.state import next_status
from engine.stats import ActionStats, RecoveryStats
from engine.store import Store
from engine.store.ports import Column, ViewQuery

from ..fold import Envelope, Projection, RowDecoder
from ..runner import Runner

# Each run keeps its latest crashes' own figures, so a run in a crash loop keeps a row of
# bounded size (it is rewritten at each of its events).
SAMPLES = 64


class Row(msgspec.Struct, frozen=True):
    """One run: how it stands, its crashes and their cost, its save timings and undos."""

    key: str  # the run id
    agent: str = ""
    started_at: float = 0.0
    status: str = RunStatus.RUNNING
    ended_at: float | None = None  # when it last completed, failed or was abandoned
    last_at: float = 0.0  # the time of its latest event
    # Its latest event hands the run over (an answer, an adoption): the resume that
    # follows continues it, no owner died.
    handed_over: bool = False
    crashes: int = 0
    recover_s: float = 0.0  # the crashes' times to recover, summed
    lost_calls: int = 0  # calls in flight at its crashes, summed
    reexecuted: int = 0  # of those, run again after the resume
    in_flight: list[int] = []  # calls with an intent and no outcome yet
    lost: list[int] = []  # calls lost at a crash with no outcome yet
    checkpoints: int = 0
    checkpoint_ms: float = 0.0
    snapshots: int = 0
    snapshot_ms: float = 0.0
    compensations: int = 0
    compensations_failed: int = 0
    rpo_calls: int | None = None  # its RPO target when it started (agent_started)
    rpo_s: float | None = None
    down: list[float] = []  # each crash's time to recover (as recover_s sums), seconds
    rto: list[float] = []  # each measured crash's resume, from its start to its first commit
    replayed: list[ev.Replayed] = []  # each measured crash's tail past the newest snapshot
    # Graded recovery: each action's choices, and those after which the run completed
    # with no other recovery; ``trying``, the latest choice whose outcome is not known yet.
    decided: dict[str, int] = {}
    mended: dict[str, int] = {}
    trying: str | None = None


def _started(r: Row, e: ev.AgentStarted) -> Row:
    return replace(r, started_at=e.at, rpo_calls=e.rpo_calls, rpo_s=e.rpo_s)


def _resumed(r: Row, e: ev.AgentResumed) -> Row:
    if r.status != RunStatus.RUNNING or r.handed_over:
        return replace(r, ended_at=None)
    took = max(0.0, e.at - r.last_at)
    return replace(
        r,
        crashes=r.crashes + 1,
        recover_s=r.recover_s + took,
        down=[*r.down, took][-SAMPLES:],
        rto=r.rto if e.recovery_s is None else [*r.rto, e.recovery_s][-SAMPLES:],
        replayed=r.replayed if e.replayed is None else [*r.replayed, e.replayed][-SAMPLES:],
        lost_calls=r.lost_calls + len(r.in_flight),
        lost=sorted({*r.lost, *r.in_flight}),
    )


def _invoked(r: Row, e: ev.ToolInvoked) -> Row:
    if e.call in r.in_flight:  # sent again under its key: still the same call in flight
        return r
    return replace(r, in_flight=[*r.in_flight, e.call])


def _outcome(r: Row, e: ev.ToolSucceeded | ev.ToolFailed) -> Row:
    call = answered(e)
    if call is None:
        return r
    ran = isinstance(e, ev.ToolFailed) or e.source == Source.EXECUTED
    again = r.reexecuted + (call in r.lost and ran)
    return replace(
        r,
        in_flight=[c for c in r.in_flight if c != call],
        lost=[c for c in r.lost if c != call],
        reexecuted=again,
    )


def _ended(r: Row, e: ev.Event) -> Row:
    if isinstance(e, ev.AgentFailed):  # a recovery may follow: the choice before it is open
        return replace(r, ended_at=e.at)
    mended = r.mended
    if r.trying is not None and isinstance(e, ev.AgentFinished):
        mended = {**mended, r.trying: mended.get(r.trying, 0) + 1}
    return replace(r, ended_at=e.at, mended=mended, trying=None)


def _decided(r: Row, e: ev.RecoveryDecided) -> Row:
    """A recovery choice: the one before it (if any) did not mend the run."""
    counted = {**r.decided, e.action: r.decided.get(e.action, 0) + 1}
    return replace(r, decided=counted, trying=e.action)


def _timed(r: Row, e: ev.SavesTimed) -> Row:
    return replace(
        r,
        checkpoints=r.checkpoints + e.checkpoints,
        checkpoint_ms=r.checkpoint_ms + e.checkpoint_ms,
        snapshots=r.snapshots + e.snapshots,
        snapshot_ms=r.snapshot_ms + e.snapshot_ms,
    )


def _compensated(r: Row, e: ev.Compensated) -> Row:
    failed = r.compensations_failed + (e.error is not None)
    return replace(r, compensations=r.compensations + 1, compensations_failed=failed)


_HANDLERS: dict[type[ev.Event], Callable[[Row, Any], Row]] = {
    ev.AgentStarted: _started,
    ev.AgentResumed: _resumed,
    ev.ToolInvoked: _invoked,
    ev.ToolSucceeded: _outcome,
    ev.ToolFailed: _outcome,
    ev.AgentFinished: _ended,
    ev.AgentFailed: _ended,
    ev.AgentAbandoned: _ended,
    ev.DryRunEnded: _ended,
    ev.SavesTimed: _timed,
    ev.Compensated: _compensated,
    ev.RecoveryDecided: _decided,
}


class View(Projection[Row]):
    name = "recovery"
    # 2: an adoption hands a run over (its resume is no crash); 3: RPO targets, each
    # crash's times to recover and the tail its resume found past the newest snapshot;
    # 4: graded recovery's choices per action
    version = "4"
    row = Row
    columns = (Column("agent"), Column("started_at", "real"), Column("status"))

    def keys(self, env: Envelope) -> Sequence[str]:
        if env.run is None or env.copied:
            return ()
        return (env.run.run_id,)

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        assert env.run is not None  # keys named a run
        key, e = env.run.run_id, env.event
        row = rows.get(key) or Row(key)
        status = next_status(row.status, e)  # the handlers read the status before e
        handler = _HANDLERS.get(type(e))
        if handler is not None:
            row = handler(row, e)
        row = replace(row, status=status)
        handed = isinstance(e, ev.HumanInputProvided | ev.RunAdopted)
        return {key: replace(row, agent=env.run.agent, last_at=e.at, handed_over=handed)}


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def figures(rows: Sequence[Row]) -> RecoveryStats:
    """The recovery figures of ``rows`` (see the module's docstring and RecoveryStats)."""
    crashed = [r for r in rows if r.crashes]
    crashes = sum(r.crashes for r in rows)
    settled = [r for r in crashed if r.status in SETTLED]
    recovered = sum(r.status == RunStatus.COMPLETED for r in crashed)
    ended = [r for r in rows if r.status in SETTLED]
    failed = sum(r.status == RunStatus.FAILED for r in ended)
    lost = sum(r.lost_calls for r in rows)
    return RecoveryStats(
        crashes=crashes,
        recovered=recovered,
        recovery_success_rate=_mean(recovered, len(settled)),
        mean_time_to_recover_s=_mean(sum(r.recover_s for r in rows), crashes),
        mean_lost_calls_per_crash=_mean(lost, crashes),
        mean_checkpoint_save_ms=_mean(
            sum(r.checkpoint_ms for r in rows), sum(r.checkpoints for r in rows)
        ),
        failure_rate=_mean(failed, len(ended)),
        compensations=sum(r.compensations for r in rows),
        compensations_failed=sum(r.compensations_failed for r in rows),
        mean_snapshot_save_ms=_mean(
            sum(r.snapshot_ms for r in rows), sum(r.snapshots for r in rows)
        ),
        crashed_runs=len(crashed),
        lost_calls=lost,
        calls_reexecuted=sum(r.reexecuted for r in rows),
        ended_runs=len(ended),
        failed_runs=failed,
        actions=actions(rows),
    )


def actions(rows: Sequence[Row]) -> dict[str, ActionStats]:
    """Graded recovery per action: chosen, then completed, and the success rate."""
    found: dict[str, ActionStats] = {}
    for action in sorted({a for r in rows for a in r.decided}):
        decided = sum(r.decided.get(action, 0) for r in rows)
        mended = sum(r.mended.get(action, 0) for r in rows)
        found[action] = ActionStats(decided, mended, _mean(mended, decided))
    return found


_DECODE = RowDecoder(View.name, Row)


def rows(store: Store, since: float | None = None, agent: str | None = None) -> list[Row]:
    """The view's rows of runs started at or after ``since``, of ``agent`` (as read)."""
    query = ViewQuery(
        equal={} if agent is None else {"agent": agent},
        at_least={} if since is None else {"started_at": since},
        order_by="started_at",
    )
    return [_DECODE(body) for body in store.views.query(View.table(), query)]


def summarize(
    store: Store, since: float | None, agent: str | None, *, catch_up: bool = True
) -> RecoveryStats:
    """Bring the view up to date (unless the caller just did), then the figures of the
    runs started at or after ``since`` (epoch seconds) of ``agent``."""
    if catch_up:
        Runner(store, [View()]).catch_up([View.name])
    return figures(rows(store, since, agent))
