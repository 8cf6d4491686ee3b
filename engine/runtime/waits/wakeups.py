"""Which suspended runs are due to continue: a waiting run's timer or receive deadline
has passed, a message it waits for was posted, or the child a parent waits on moved."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import observe
from ...kinds import RunStatus
from ...log.history import rebuild
from ...log.state import RunState
from ...log.waiting import Child, Message
from ...policy.failure import describe
from ...store import Store
from ..children import spawn as children
from . import mailbox

if TYPE_CHECKING:
    from ..host.port import Host
    from ..run.results import RunResult


def due(store: Store, state: RunState, now: float) -> bool:
    """Whether the paused or waiting run ``state`` would get further if resumed now."""
    on = state.waits_on
    if isinstance(on, Child):
        return children.child_due(store, state)
    if state.status != RunStatus.WAITING:
        return False
    if state.wake_at is not None and state.wake_at <= now:
        return True
    return isinstance(on, Message) and mailbox.message_due(store, state)


def after_run(host: Host, store: Store, result: RunResult) -> None:
    """A run's execution ended (``result``) and its lease is let go: if it suspended and
    is due already (a message posted while it was suspending, whose sender's wake-up
    found it still held), wake it. Every suspension is looked at again after its lease
    is let go, and every post is followed by a wake-up: no message is left unseen."""
    if result.status != RunStatus.WAITING:
        return
    try:
        if due(store, rebuild(store, result.run_id), host.config.wall()):
            host.wake(result.run_id)
    except Exception as e:  # recover looks again; the run's own result stands
        observe.get(run_id=result.run_id).warning("wake_check_failed", error=describe(e))
