"""The events of many agents: child runs, supervision, cross-agent locks, messages and
durable timers (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from typing import Any

from ..kinds import Purpose, RunStatus, WaitReason
from .base import Event

# --- many agents: child runs, supervision, locks, messages, timers ----------------------


class ChildSpawned(Event, frozen=True, tag="child_spawned"):
    """The parent started a child run (committed with the child's ``agent_started``):
    its spawn call's intent. A replayed spawn returns this child and starts nothing."""

    call: int
    child_run_id: str
    agent: str  # the child's module:qualname
    args_hash: str = ""  # keyed hash of the agent and its input (the determinism check)


class ChildFinished(Event, frozen=True, tag="child_finished"):
    """The parent saw its child (of spawn ``call``) end: the spawn call's outcome.
    ``status`` is completed, failed or abandoned; replay returns ``output`` or raises
    ChildFailed with ``error``."""

    call: int
    child_run_id: str
    status: RunStatus
    output: Any = None
    error: str | None = None


class ChildPaused(Event, frozen=True, tag="child_paused"):
    """The parent pauses because its child (of spawn ``call``) waits for a person:
    ``asking_run_id`` is the run that asked (the child, or a descendant of it)."""

    call: int
    child_run_id: str
    asking_run_id: str
    question: str


class ChildRestarted(Event, frozen=True, tag="child_restarted"):
    """A supervisor restarted the child of spawn ``call``: ``child_run_id`` does its work
    from now on (the same run, resumed, for one_for_one; a new run otherwise)."""

    call: int
    child_run_id: str
    previous_run_id: str
    strategy: str
    reason: str
    restarts: int = 1  # restarts within the supervisor's window, this one included


class SupervisorEscalated(Event, frozen=True, tag="supervisor_escalated"):
    """A supervisor gave up (past its restart intensity): the child's failure becomes
    the supervisor's own, and escalates to its parent."""

    call: int
    child_run_id: str
    reason: str
    restarts: int = 0


class LockAcquired(Event, frozen=True, tag="lock_acquired"):
    """The run holds the cross-agent lock ``name`` with fencing token ``fence``."""

    call: int
    name: str
    fence: int
    ttl: float = 0.0


class LockReleased(Event, frozen=True, tag="lock_released"):
    call: int
    name: str
    fence: int


class MessageSent(Event, frozen=True, tag="message_sent"):
    """The run sent a message (posted to the recipient's inbox in the same commit)."""

    call: int
    to_run_id: str
    topic: str
    message_id: str
    args_hash: str = ""
    parent_call: int | None = None  # a fork's send that took over its parent's (posted nothing)


class MessagePosted(Event, frozen=True, tag="message_posted"):
    """A message in a run's inbox stream (``inbox:<run id>``)."""

    message_id: str
    from_run_id: str
    topic: str
    value: Any = None


class MessageReceived(Event, frozen=True, tag="message_received"):
    """The run consumed a message (once: replays return ``value``); ``message_id`` None
    when the wait timed out (``value`` None)."""

    call: int
    topic: str
    message_id: str | None = None
    value: Any = None


class TimerSet(Event, frozen=True, tag="timer_set"):
    """A durable wait of ``call`` ends at ``until`` (epoch seconds): a sleep's wake-up
    (``purpose`` "sleep") or a receive's deadline ("recv", with its ``topic``)."""

    call: int
    until: float
    purpose: Purpose = Purpose.SLEEP
    topic: str | None = None
    args_hash: str = ""  # a sleep's duration, hashed (replay sees a changed one); older: ""


class RunWaiting(Event, frozen=True, tag="run_waiting"):
    """The run stops holding a thread until something is due: ``reason`` "timer" (at
    ``until``), "message" (on ``topic``, or ``until``) or "child" (``child_run_id``
    ends). Status ``waiting``; ``recover`` (or the sender, the child) wakes it."""

    call: int
    reason: WaitReason
    until: float | None = None
    topic: str | None = None
    child_run_id: str | None = None


AnyAgentEvent = (
    ChildSpawned
    | ChildFinished
    | ChildPaused
    | ChildRestarted
    | SupervisorEscalated
    | LockAcquired
    | LockReleased
    | MessageSent
    | MessagePosted
    | MessageReceived
    | TimerSet
    | RunWaiting
)

__all__ = [
    "ChildFinished",
    "ChildPaused",
    "ChildRestarted",
    "ChildSpawned",
    "LockAcquired",
    "LockReleased",
    "MessagePosted",
    "MessageReceived",
    "MessageSent",
    "RunWaiting",
    "SupervisorEscalated",
    "TimerSet",
]
