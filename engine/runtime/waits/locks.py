"""Cross-agent locks with fencing tokens: ``with run.lock(name, ttl) as fence:``.

A lock is a call identity (kind ``lock``). Live, the run waits until the store gives it
the lock, then records ``lock_acquired`` with the fence; a heartbeat renews the hold
while the block runs, and leaving the block (normally or by an exception) records
``lock_released`` and frees it. A pause, a suspension or a lost lease leaving the block
records nothing and frees nothing: the hold expires unless the run comes back first.

On replay the recorded fence is returned. A block recorded as left takes nothing; one
left unfinished (a crash, a pause inside it) takes the lock again keeping its fence if
nobody took it since; otherwise the fence is stale, the block runs with it all the same
(replay is deterministic) and the outside service, seeing a higher fence, rejects its
writes. A fork never inherits an open block (a rewind target inside one means before its
acquire): it takes the lock afresh. The fence is a ``Fence``, which argument hashes leave
out, so a call passed the fence is the same call under a newer one. See docs/locks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ... import events as ev
from ... import observe
from ...errors import RunInterrupt, UsageError
from ...kinds import SETTLED
from ...polling import poll_until
from ...store.locking import check_name, check_ttl
from ..defs.definitions import Fence
from ..journal.callstate import CallState

if TYPE_CHECKING:
    from ...store import Store
    from ..host.port import Host
    from ..run.context import RunContext
    from ..run.results import RunResult

MAX_POLL = 0.5  # seconds between two looks at a lock another process holds


@contextlib.contextmanager
def lock(ctx: RunContext, name: str, ttl: float) -> Iterator[int]:
    """Hold the lock ``name`` for the block; its fencing token is the block's value."""
    check_name(name)
    ttl = check_ttl(ttl)
    call = ctx.next_call()
    entry = ctx.recorded(call, "lock", name)
    if entry is None:
        fence, held = _acquire(ctx, call, name, ttl), True
    else:
        fence, held = entry.fence, _retake(ctx, entry, name, ttl)
    try:
        yield Fence(fence)
    except (RunInterrupt, GeneratorExit):
        _forget(ctx, name, held)  # paused, suspended or stopped: the hold is left to expire
        raise
    except Exception:
        _leave(ctx, call, name, fence, entry, held)
        raise
    except BaseException:  # KeyboardInterrupt, SystemExit: as a crash would leave it
        _forget(ctx, name, held)
        raise
    _leave(ctx, call, name, fence, entry, held)


def _acquire(ctx: RunContext, call: int, name: str, ttl: float) -> int:
    """Wait until the store gives ``name`` to this run, and record it (live)."""
    ctx.live(call, f"lock {name!r}")
    _not_nested(ctx, name)
    store: Store = ctx.store
    waiting = False

    def take() -> int | None:
        nonlocal waiting
        if waiting:
            ctx.host.leases.check(ctx.run_id)  # another owner took the run: stop waiting
        fence = store.locks.acquire(name, ctx.run_id, ttl)
        if fence is None and not waiting:
            ctx.log.info("lock_waiting", lock=name)
            waiting = True
        return fence

    # In-process releases wake this at once; other processes' are seen by polling.
    fence = poll_until(take, None, first=0.005, most=MAX_POLL, news=ctx.host.signals)
    assert fence is not None  # no deadline: only a fence ends the wait
    try:
        ctx.record(
            ev.LockAcquired(at=ctx.config.wall(), call=call, name=name, fence=fence, ttl=ttl)
        )
    except BaseException:  # not recorded: nobody may rely on this fence
        store.locks.release(name, ctx.run_id, fence)
        raise
    ctx.host.lock_keeper.keep(store, ctx.run_id, name, fence, ttl)
    ctx.log.info("lock_acquired", lock=name, fence=fence)
    return fence


def _retake(ctx: RunContext, entry: CallState, name: str, ttl: float) -> bool:
    """A replayed lock: take it again, keeping its fence, if its block did not end and
    nobody took it since; whether this execution holds it."""
    if entry.completed or ctx.verify:
        return False
    ctx.host.leases.check(ctx.run_id)
    _not_nested(ctx, name)
    if ctx.store.locks.acquire(name, ctx.run_id, ttl, keep_fence=entry.fence) is None:
        ctx.log.warning(
            "lock_fence_stale",
            lock=name,
            fence=entry.fence,
            reason="another run took the lock since; the outside service rejects this fence",
        )
        return False
    ctx.host.lock_keeper.keep(ctx.store, ctx.run_id, name, entry.fence, ttl)
    return True


def _not_nested(ctx: RunContext, name: str) -> None:
    if ctx.host.lock_keeper.holds(ctx.run_id, name):
        raise UsageError(f"run {ctx.run_id} already holds lock {name!r}: locks do not nest")


def _leave(
    ctx: RunContext, call: int, name: str, fence: int, entry: CallState | None, held: bool
) -> None:
    """The block ended: record the release (once) and free the lock. If the record
    cannot be written (the run was taken over), the hold is left to expire."""
    try:
        if entry is None or not entry.completed:
            ctx.live(call, f"release lock {name!r}")
            ctx.record(ev.LockReleased(at=ctx.config.wall(), call=call, name=name, fence=fence))
    except BaseException:
        _forget(ctx, name, held)
        raise
    kept = ctx.host.lock_keeper.drop(ctx.run_id, name)
    if held:
        if not kept:
            ctx.log.warning("lock_was_lost", lock=name, fence=fence)
        ctx.store.locks.release(name, ctx.run_id, fence)
        ctx.host.signals.notify()


def _forget(ctx: RunContext, name: str, held: bool) -> None:
    if held:
        ctx.host.lock_keeper.drop(ctx.run_id, name)


def release_run(host: Host, store: Store, run_id: str) -> None:
    """Free every lock ``run_id`` still holds (it ended: completed, failed, abandoned)."""
    host.lock_keeper.drop_run(run_id)
    if store.locks.release_all(run_id):
        host.signals.notify()


def after_run(host: Host, store: Store, result: RunResult) -> None:
    """A run's execution ended: a run that finished for good frees its locks."""
    if result.status not in SETTLED or result.not_resumed is not None:
        return
    try:
        release_run(host, store, result.run_id)
    except Exception as e:  # the run's result stands; its locks expire at their ttl
        observe.get(run_id=result.run_id).warning("locks_not_released", error=str(e))
