"""Which suspended runs are due to continue: a waiting run's timer or receive deadline
has passed, a message it waits for was posted, or the child a parent waits on moved."""

from __future__ import annotations

from ..kinds import RunStatus
from ..state import RunState
from ..store import Store
from . import children, mailbox


def due(store: Store, state: RunState, now: float) -> bool:
    """Whether the paused or waiting run ``state`` would get further if resumed now."""
    on = state.waiting_on or ""
    if on.startswith("child:"):
        return children.child_due(store, state)
    if state.status != RunStatus.WAITING:
        return False
    if state.wake_at is not None and state.wake_at <= now:
        return True
    return on.startswith("message:") and mailbox.message_due(store, state)
