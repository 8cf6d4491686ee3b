"""A parent's durable wait for its children: the outcome of each spawn call.

One wait serves ``child.result()`` and a sync ``run.gather`` alike: each pass reads the
state of every child not yet ended, so any of them can stop it at once. A child that
ended is recorded in the parent (``child_finished``): its output is returned; a failure
is handed to the supervisor of a supervising parent, else raised as ChildFailed. A
running child is waited for (woken at once by news from this process, else polling the
store) and started again if its owner died. A child that waits for a person pauses the
parent (``child_paused``, naming the run that asked), one that waits on a timer or a
message suspends it (``run_waiting``): neither holds a thread; the child's end
continues it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast

from ... import codec
from ... import events as ev
from ...errors import ChildFailed, CorruptData, DryRunStop, Paused, RunInterrupt, Suspended
from ...kinds import RETURNED, SETTLED, SUSPENDED, RunStatus, WaitReason
from ...log.history import rebuild
from ...log.state import RunState
from ...log.waiting import of, shown
from ...polling import poll_until
from . import supervisor
from .wake import asker

if TYPE_CHECKING:
    from ..run.context import RunContext

POLL_FIRST = 0.02  # seconds between reads of a running child's state, doubling...
POLL_MAX = 0.5  # ...up to this (news from this process wakes the wait at once)


class Waited:
    """What a parent knows of one spawn call: its call, the child run doing its work,
    the run its handle shows until it is waited for (``shown``: the spawned one, on a
    replay after a restart), the outcome recorded for it (``recorded``) or to be given
    (``outcome``: None while it must be waited for), and the type the child's agent
    declares it returns."""

    def __init__(
        self,
        ctx: RunContext,
        call: int,
        run_id: str,
        *,
        shown: str | None = None,
        recorded: ev.ChildFinished | None = None,
        outcome: ev.ChildFinished | None = None,
        started_at: float | None = None,
        returns: Any = None,
    ) -> None:
        self.ctx, self.call, self.run_id, self.shown = ctx, call, run_id, shown
        self.returns = returns  # the child agent's declared result type (engine.codec)
        self.recorded, self.outcome = recorded, outcome
        # When this execution started the child (monotonic): it is not started again
        # while its thread may still be taking its lease.
        self.started_at = started_at
        self.lock = threading.Lock()  # one wait at a time (result() and await racing)


def settle(w: Waited) -> Any:
    """The child's output, waited for durably; ChildFailed if it failed."""
    [outcome] = settle_all([w])
    if isinstance(outcome, ChildFailed):
        raise outcome
    return deliver(w, outcome)


def settle_all(ws: Sequence[Waited]) -> list[ev.ChildFinished | ChildFailed]:
    """The outcomes of ``ws``, in their order, waited for durably all at once: each
    child's end, or ChildFailed when its supervisor gave up. A child that pauses or
    suspends the parent stops the wait at once (the ends seen so far recorded)."""
    unique = list({id(w): w for w in ws}.values())
    with ExitStack() as held:
        for w in sorted(unique, key=lambda w: w.call):  # one order: no two waits deadlock
            held.enter_context(w.lock)
            w.shown = None  # waited for: its handle names the run doing its work
        gave_up = _wait([w for w in unique if w.outcome is None])
        return [gave_up.get(id(w)) or cast("ev.ChildFinished", w.outcome) for w in ws]


def deliver(w: Waited, done: ev.ChildFinished) -> Any:
    """The output of a finished child, as the type its agent declares (live and on
    replay alike; an output that does not fit comes back as recorded), or its failure
    raised (the spawn call named as the failed call, so a resume of a run this ends
    waits on the child again)."""
    if done.status == RunStatus.DRY_RUN and done.error is not None:  # stopped: so does this
        raise DryRunStop(f"dry run stopped at child run {done.child_run_id}: {done.error}", w.call)
    if done.status in RETURNED:
        what = f"output of child run {done.child_run_id}"
        return codec.typed(done.output, w.returns, what, lenient=True)
    w.ctx.failed_call = w.call
    raise ChildFailed(done.child_run_id, done.error, done.status)


def _wait(ws: list[Waited]) -> dict[int, ChildFailed]:
    """Wait until every child of ``ws`` ended (setting its ``outcome``), reading each
    unfinished one's state every pass; the escalations met, by ``id`` of their Waited.
    A pass that restarted a child ends the poll: the next starts over at its shortest
    pause (the new child's turn)."""
    if not ws:
        return {}
    ctx = ws[0].ctx
    for w in ws:
        ctx.live(w.call, f"wait for child run {w.run_id}")
    gave_up: dict[int, ChildFailed] = {}
    pending = list(ws)
    while pending:
        poll_until(
            lambda: _pass(ctx, pending, gave_up),
            None,
            first=POLL_FIRST,
            most=POLL_MAX,
            news=ctx.host.signals,
        )
    return gave_up


def _pass(ctx: RunContext, pending: list[Waited], gave_up: dict[int, ChildFailed]) -> bool:
    """One look at every child in ``pending`` (those that ended are taken out); whether
    the poll is over: none is left, or a supervisor restarted one."""
    if ctx.ended:
        raise _stopped(ctx)
    ctx.host.leases.check(ctx.run_id)
    stopped: list[tuple[Waited, RunState]] = []
    restarted = False
    for w in list(pending):
        moved = _look(w, gave_up)
        if moved is None:
            pending.remove(w)
        elif moved.status in SUSPENDED:
            stopped.append((w, moved))
        elif moved.status in SETTLED:
            restarted = True
        else:
            _revive(w)
    _stop_for(stopped)
    return restarted or not pending


def _look(w: Waited, gave_up: dict[int, ChildFailed]) -> RunState | None:
    """Read the child's state; one that ended is recorded (None returned: its
    ``outcome`` set, or its escalation put in ``gave_up``). A settled state returned
    means a supervisor restarted it (``w.run_id`` names the new run)."""
    # A supervisor's restart in this execution may have replaced the child a handle
    # names (a sibling restarted with the failed one): wait on the run doing its work.
    w.run_id = supervisor.current(w.ctx, w.call, w.run_id)
    state = _child_state(w)
    if state.status not in SETTLED:
        return state
    try:
        w.outcome = _finished(w, state)
    except ChildFailed as failed:  # its supervisor gave up: the others are still waited on
        gave_up[id(w)] = failed
        return None
    return None if w.outcome is not None else state


def _stop_for(stopped: list[tuple[Waited, RunState]]) -> None:
    """Pause the parent for the first child (in the order waited) whose chain asks a
    person, else suspend it on the first that waits on a timer, a message or approval."""
    for w, state in stopped:
        if state.status == RunStatus.PAUSED:
            _pause(w, state)
    for w, state in stopped:
        if state.status == RunStatus.WAITING or state.status == RunStatus.HELD:  # until approved
            _suspend(w)


def _child_state(w: Waited) -> RunState:
    state = rebuild(w.ctx.store, w.run_id)
    if state.position == 0:
        raise CorruptData(
            f"run {w.ctx.run_id}: its child run {w.run_id} (call {w.call}) has no events"
        )
    return state


def _finished(w: Waited, state: RunState) -> ev.ChildFinished | None:
    """Record the child's end in the parent (once); the outcome to give, or None when a
    supervisor restarted the failed child (``w.run_id`` then names the new run)."""
    ctx = w.ctx
    completed = state.status in RETURNED  # a dry-run child's end too (not a failure)
    done = ev.ChildFinished(
        at=ctx.config.wall(),
        call=w.call,
        child_run_id=w.run_id,
        status=state.status,
        output=state.output if completed else None,
        error=state.error,  # None when completed; where a dry-run child stopped
    )
    if not _same(w.recorded, done):
        _record(ctx, done)
        w.recorded = done
    if completed or ctx.agent.supervise is None:
        return done
    ctx.failed_call = w.call  # an escalation ends the parent at this call
    w.run_id = supervisor.restart(ctx, w.call, w.run_id, state.error)
    w.recorded, w.started_at = None, time.monotonic()
    return None


def _same(a: ev.ChildFinished | None, b: ev.ChildFinished) -> bool:
    """Whether ``a`` (recorded) already says what ``b`` says: a resumed parent that
    waits again on a child still failed records nothing new."""
    if a is None:
        return False
    return (a.child_run_id, a.status, a.output, a.error) == (
        b.child_run_id,
        b.status,
        b.output,
        b.error,
    )


def _pause(w: Waited, state: RunState) -> None:
    """The child waits for a person: pause the parent, naming the run that asked (the
    child or a descendant). Returns (to wait on) while that chain is still moving."""
    ctx = w.ctx
    found = asker(ctx.store, state)
    if found is None:
        return
    asking, question = found
    paused = ev.ChildPaused(
        at=ctx.config.wall(),
        call=w.call,
        child_run_id=w.run_id,
        asking_run_id=asking,
        question=question,
    )
    mine = ctx.writer.state
    if mine.status != RunStatus.PAUSED or mine.waits_on != of(paused):  # a resumed parent: once
        _record(ctx, paused)
    raise Paused(shown(of(paused)))


def _suspend(w: Waited) -> None:
    """The child waits on a timer or a message: the parent waits too, holding no
    thread (the child's end or pause continues it)."""
    ctx = w.ctx
    mine = ctx.writer.state
    waiting = ev.RunWaiting(
        at=ctx.config.wall(), call=w.call, reason=WaitReason.CHILD, child_run_id=w.run_id
    )
    if mine.status != RunStatus.WAITING or mine.waits_on != of(waiting):
        _record(ctx, waiting)
    raise Suspended(shown(of(waiting)))


def _revive(w: Waited) -> None:
    """A running child whose owner died (or that nobody took up yet) is started again in
    this process: the subtree recovers with its parent. Not again within a lease's time
    of the last start (its thread may still be taking the lease)."""
    ctx = w.ctx
    if ctx.host.leases.dead_holder(ctx.store, w.run_id) is None:
        return  # a live owner executes it
    now = time.monotonic()
    if w.started_at is not None and now - w.started_at < ctx.config.lease_ttl:
        return
    w.started_at = now
    ctx.host.start(w.run_id)


def _record(ctx: RunContext, event: ev.Event) -> None:
    if not ctx.record_unless_over(event):
        raise _stopped(ctx)


def _stopped(ctx: RunContext) -> RunInterrupt:
    """This execution is over (a wait outlived it): stop, writing nothing."""
    state = ctx.writer.state
    if state.status == RunStatus.PAUSED:
        return Paused(state.waiting or "")
    return Suspended(state.waiting or f"run {ctx.run_id} stopped")
