"""A supervised parent's restarts of its failed children: :mod:`engine.policy.supervision`
decides from the parent's log, this module carries the decision out and records it.

Every decision is made from what the parent's log records, so a replayed parent makes
the same one, and a decision already carried out (child_restarted or
supervisor_escalated after the failure it answers) is never carried out twice: a crash
in the middle of restarting several children finishes the restart on resume. The failed
child's own restart is recorded last: until it is, a replay sees the failure again and
comes back here.
"""

from __future__ import annotations

import math
import threading
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from ... import events as ev
from ...errors import ChildFailed
from ...kinds import RunStatus
from ...log.history import RunWriter, read_events, rebuild, run_stream, started
from ...log.state import evolve
from ...policy.supervision import Child, Decision, Restart, Supervisor, decide, family
from ...store import Append
from ..defs.registry import Registry
from ..run.catalog import Catalog
from ..run.repository import RunRepository
from ..undo.saga import Stopping, abandon_held, stopped
from .start import open_child

if TYPE_CHECKING:
    from ..run.context import RunContext

# Per supervising execution: one restart at a time (an async parent may see two children
# fail at once), and the child each spawn call is done by since this execution began.
_serial: weakref.WeakKeyDictionary[RunContext, threading.Lock] = weakref.WeakKeyDictionary()
_current: weakref.WeakKeyDictionary[RunContext, dict[int, str]] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def current(ctx: RunContext, call: int, run_id: str) -> str:
    """The run that does the work of spawn ``call`` now: ``run_id`` (what the log said
    when this execution began, or the handle's), unless a restart in this execution
    replaced it. A wait on a child asks this before it waits."""
    return _current.get(ctx, {}).get(call, run_id)


@dataclass(frozen=True)
class Episode:
    """One failure a supervisor answers: the child (``failed``) of spawn ``call``, seen
    ended at ``at`` with ``status``; the parent's log ``before`` (up to that record) and
    ``after`` it (what answering it already recorded)."""

    call: int
    failed: Child
    at: float
    status: str
    before: Sequence[ev.Event]
    after: Sequence[ev.Event]

    @classmethod
    def of(cls, events: Sequence[ev.Event], call: int, run_id: str, now: float) -> Episode:
        """The latest failure of ``run_id`` at spawn ``call`` that ``events`` (the parent's
        log) record; one seen only ``now`` if none is recorded."""
        found = len(events)
        for i in range(len(events) - 1, -1, -1):
            e = events[i]
            if isinstance(e, ev.ChildFinished) and (e.call, e.child_run_id) == (call, run_id):
                found = i
                break
        end = events[found] if found < len(events) else None
        at, status = (end.at, end.status) if isinstance(end, ev.ChildFinished) else (now, "")
        before, after = events[: found + 1], events[found + 1 :]
        kids = family(before).children
        failed = next((c for c in kids if c.call == call), Child(call, run_id, len(kids)))
        failed = Child(call, run_id, failed.order)
        return cls(call, failed, at, status, before, after)

    def escalated(self) -> bool:
        return any(
            isinstance(e, ev.SupervisorEscalated) and e.child_run_id == self.failed.run_id
            for e in self.after
        )

    def done(self) -> dict[tuple[int, str], ev.ChildRestarted]:
        """The restarts already recorded for this failure, by (call, previous run)."""
        return {
            (e.call, e.previous_run_id): e for e in self.after if isinstance(e, ev.ChildRestarted)
        }


def restart(ctx: RunContext, call: int, child_run_id: str, error: str | None) -> str:
    """The supervised parent ``ctx`` (``ctx.agent.supervise``) saw the child of spawn
    ``call`` fail with ``error``: restart by its strategy (recording ``child_restarted``)
    and return the run id that now does the child's work; past the restart intensity,
    record ``supervisor_escalated`` and raise ChildFailed."""
    sup = ctx.agent.supervise
    if sup is None:
        raise ChildFailed(child_run_id, error)
    with _guard:
        lock = _serial.setdefault(ctx, threading.Lock())
    with lock:
        events = [r.event for r in read_events(ctx.store, ctx.run_id)]
        now = family(events).child(call)
        if now is not None and now.run_id != child_run_id:
            return now.run_id  # a stale failure: a restart replaced that run already
        episode = Episode.of(events, call, child_run_id, ctx.config.wall())
        status = episode.status or rebuild(ctx.store, child_run_id).status
        abandoned = status == RunStatus.ABANDONED
        if episode.escalated():
            raise ChildFailed(child_run_id, error, status)
        ctx.live(call, f"restart child {child_run_id}")  # verifying: the log ends here
        kin = family(episode.before)
        decision = decide(sup, kin.episodes, episode.at, episode.failed, kin.children, abandoned)
        if decision.escalate:
            _escalate(ctx, sup, episode, decision, error)
        return _carry_out(ctx, sup, episode, decision, error or "no reason recorded")


def _escalate(
    ctx: RunContext, sup: Supervisor, episode: Episode, decision: Decision, error: str | None
) -> None:
    """Give up: record why, and fail with the child's failure (the parent's own parent,
    if it supervises, sees that)."""
    child = episode.failed.run_id
    reason = (
        f"{error or 'no reason recorded'} (gave up: {decision.count} restarts within "
        f"{sup.within:g}s, at most {sup.max_restarts})"
    )
    event = ev.SupervisorEscalated(
        at=ctx.config.wall(),
        call=episode.call,
        child_run_id=child,
        reason=reason,
        restarts=decision.count,
    )
    ctx.record(event)
    ctx.log.warning("supervisor_escalated", call=episode.call, child=child, reason=reason)
    raise ChildFailed(child, reason, episode.status or RunStatus.FAILED)


def _carry_out(
    ctx: RunContext, sup: Supervisor, episode: Episode, decision: Decision, error: str
) -> str:
    """Restart what ``decision`` says and was not restarted yet: stop and abandon the
    runs to replace (latest spawned first), then record each restart in spawn order, the
    failed child's last; the run that does the failed child's work now."""
    done = episode.done()
    at = next(iter(done.values())).at if done else ctx.config.wall()
    todo = [r for r in decision.restarts if (r.call, r.run_id) not in done]
    runs = _runs(ctx)
    stopping = Stopping(
        seconds=math.inf,
        elsewhere=True,
        why=f"a restart by its supervisor {ctx.run_id}",
        check=lambda: ctx.host.leases.check(ctx.run_id),
    )
    for r in reversed(todo):
        if not r.resume:
            _abandon(runs, r, stopping)
    todo.sort(key=lambda r: r.call == episode.call)  # stable: spawn order, failed last
    now = _current.setdefault(ctx, {})
    for r in todo:
        why = (
            error if r.call == episode.call else f"sibling {episode.failed.run_id} failed: {error}"
        )
        record = ev.ChildRestarted(
            at=at,
            call=r.call,
            child_run_id=r.run_id if r.resume else uuid.uuid4().hex,
            previous_run_id=r.run_id,
            strategy=sup.strategy,
            reason=why,
            restarts=decision.count,
        )
        _resume(ctx, record, runs, stopping) if r.resume else _start_new(ctx, record)
        now[r.call] = record.child_run_id
        ctx.log.info("child_restarted", call=r.call, child=record.child_run_id, reason=why)
    for key, e in done.items():
        now.setdefault(key[0], e.child_run_id)
    return now.get(episode.call, episode.failed.run_id)


def _runs(ctx: RunContext) -> RunRepository:
    """The parent's store and leases as a repository (the children's agents looked up
    in the parent's engine first)."""
    known = ctx.agent.registry
    return RunRepository(
        Catalog(store=ctx.store), ctx.host.leases, known if isinstance(known, Registry) else None
    )


def _abandon(runs: RunRepository, r: Restart, stopping: Stopping) -> None:
    """Stop and abandon (compensate) the run a restart replaces, with its subtree; a
    child whose undo cannot finish fails the supervisor, naming it (resume retries)."""
    with stopped(runs, r.run_id, stopping):
        result = abandon_held(runs, r.run_id, stopping, completed_too=True)
    if result.status == RunStatus.FAILED:
        raise ChildFailed(r.run_id, f"it could not be abandoned to restart it: {result.error}")


def _resume(ctx: RunContext, record: ev.ChildRestarted, runs: RunRepository, s: Stopping) -> None:
    """Record the restart with the failed child's resume marker, in one commit (a crash
    leaves the child failed and unrestarted, or running with no owner: recover or the
    parent's wait executes it), then execute the child from its log."""
    child = record.child_run_id
    with stopped(runs, child, s):  # the thread that failed it lets go first
        state = rebuild(ctx.store, child)
        if state.status != RunStatus.FAILED:  # someone resumed it already
            ctx.record(record)
        else:
            marker = ev.AgentResumed(at=ctx.config.wall(), owner=ctx.host.owner, reason="restarted")
            after = evolve(state, marker, state.position + 1)
            extra = [Append(run_stream(child), after.position, marker)]
            ctx.record(record, extra=extra, rows=[RunWriter.index_row(after)])
    ctx.host.start(child)


def _start_new(ctx: RunContext, record: ev.ChildRestarted) -> None:
    """Start a new run of the replaced child's agent on its input, committed with the
    restart (the commit a spawn makes), then execute it. It takes over the replaced run's
    effects its abandon left standing (no compensation) when it makes the same calls."""
    old = started(ctx.store, record.previous_run_id)  # a child: never a fork
    head = msgspec.structs.replace(
        old, at=ctx.config.wall(), parent_run_id=ctx.run_id, reuses=record.previous_run_id
    )
    open_child(ctx, record, head)
