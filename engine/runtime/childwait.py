"""A parent's durable wait for its child: the outcome of the spawn call.

The wait reads the child's state from the store. A child that ended is recorded in the
parent (``child_finished``): its output is returned; a failure is handed to the
supervisor of a supervising parent, else raised as ChildFailed. A running child is
waited for (woken at once by news from this process, else polling the store) and
started again if its owner died. A child that waits for a person pauses the parent
(``child_paused``, naming the run that asked), one that waits on a timer or a message
suspends it (``run_waiting``): neither holds a thread; the child's end continues it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..errors import ChildFailed, CorruptData, Paused, RunInterrupt, Suspended
from ..history import rebuild
from ..kinds import RunStatus
from ..state import RunState
from . import supervisor
from .childwake import asker, paused_text

if TYPE_CHECKING:
    from .context import RunContext

POLL_FIRST = 0.02  # seconds between reads of a running child's state, doubling...
POLL_MAX = 0.5  # ...up to this (news from this process wakes the wait at once)
SETTLED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED)


class Waited:
    """What a parent knows of one spawn call: its call, the child run doing its work,
    and the outcome recorded for it (``recorded``) or to be given (``outcome``: None
    while it must be waited for)."""

    def __init__(
        self,
        ctx: RunContext,
        call: int,
        run_id: str,
        *,
        recorded: ev.ChildFinished | None = None,
        outcome: ev.ChildFinished | None = None,
        started_at: float | None = None,
    ) -> None:
        self.ctx, self.call, self.run_id = ctx, call, run_id
        self.recorded, self.outcome = recorded, outcome
        # When this execution started the child (monotonic): it is not started again
        # while its thread may still be taking its lease.
        self.started_at = started_at
        self.lock = threading.Lock()  # one wait at a time (result() and await racing)


def settle(w: Waited) -> Any:
    """The child's output, waited for durably; ChildFailed if it failed."""
    with w.lock:
        if w.outcome is None:
            w.outcome = _wait(w)
        done = w.outcome
    return deliver(w.ctx, w.call, done)


def deliver(ctx: RunContext, call: int, done: ev.ChildFinished) -> Any:
    """The output of a finished child, or its failure raised (the spawn ``call`` named
    as the failed call, so a resume of a run this ends waits on the child again)."""
    if done.status == RunStatus.COMPLETED:
        return done.output
    ctx.failed_call = call
    raise ChildFailed(done.child_run_id, done.error, done.status)


def _wait(w: Waited) -> ev.ChildFinished:
    ctx = w.ctx
    ctx.live(w.call, f"wait for child run {w.run_id}")
    signals = ctx.host.signals
    delay = POLL_FIRST
    while True:
        seen = signals.version  # before reading: news from now on ends the next wait
        if ctx.ended:
            raise _stopped(ctx)
        ctx.host.leases.check(ctx.run_id)
        # A supervisor's restart in this execution may have replaced the child a handle
        # names (a sibling restarted with the failed one): wait on the run doing its work.
        w.run_id = supervisor.current(ctx, w.call, w.run_id)
        state = _child_state(w)
        if state.status in SETTLED:
            done = _finished(w, state)
            if done is not None:
                return done
            delay = POLL_FIRST  # restarted: the new child's turn
            continue
        if state.status == RunStatus.PAUSED:
            _pause(w, state)
        elif state.status == RunStatus.WAITING:
            _suspend(w)
        else:
            _revive(w)
        signals.wait(seen, delay)
        delay = min(delay * 2, POLL_MAX)


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
    completed = state.status == RunStatus.COMPLETED
    done = ev.ChildFinished(
        at=ev.now(),
        call=w.call,
        child_run_id=w.run_id,
        status=str(state.status),
        output=state.output if completed else None,
        error=None if completed else state.error,
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
    text = paused_text(asking, question)
    mine = ctx.writer.state
    if mine.status != RunStatus.PAUSED or mine.waiting != text:  # a resumed parent: once
        paused = ev.ChildPaused(
            at=ev.now(),
            call=w.call,
            child_run_id=w.run_id,
            asking_run_id=asking,
            question=question,
        )
        _record(ctx, paused)
    raise Paused(text)


def _suspend(w: Waited) -> None:
    """The child waits on a timer or a message: the parent waits too, holding no
    thread (the child's end or pause continues it)."""
    ctx = w.ctx
    mine = ctx.writer.state
    on = f"child:{w.run_id}"
    if mine.status != RunStatus.WAITING or mine.waiting_on != on:
        _record(ctx, ev.RunWaiting(at=ev.now(), call=w.call, reason="child", child_run_id=w.run_id))
    raise Suspended(f"child {w.run_id}")


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
