"""RunState and the pure fold ``evolve(state, event, position) -> state``.

The fold does no I/O and never raises; tools and models run elsewhere and only their
recorded results enter it. RunState stays bounded by the run's working state (no call
journal, no checkpoint list, no copy of the input) so a snapshot does not grow with the
run and a rebuild is snapshot + tail. Checkpoints are an index of positions by name read
from the log (``engine.log.history.checkpoints``); the input lives once, in ``agent_started``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace

from .. import events as ev
from ..kinds import LineageKind, RunStatus
from .effects import answered
from .waiting import Approval, WaitingOn, deadline, from_legacy, of, shown

OBSERVATION_LIMIT = 2048
RECENT_LIMIT = 20


class CheckpointRef(msgspec.Struct, frozen=True):
    """One occurrence of a named checkpoint: its name, position and time."""

    name: str
    position: int
    at: float


class PendingCall(msgspec.Struct, frozen=True):
    """An intent with no outcome yet: uncertain if the run crashed here."""

    call: int
    tool: str
    key: str | None = None
    side_effect: bool = False
    position: int = 0


class Root(msgspec.Struct, frozen=True, tag="root"):
    """A run of its own: started by ``engine.run`` (or imported), not by another run."""


class ChildOf(msgspec.Struct, frozen=True, tag="child"):
    """A child run of ``parent_run_id``: its spawn, or a supervisor's restart."""

    parent_run_id: str


class ForkOf(msgspec.Struct, frozen=True, tag="fork"):
    """A fork rewound from ``parent_run_id`` at ``fork_position``."""

    parent_run_id: str
    fork_position: int


Lineage = Root | ChildOf | ForkOf


def lineage_of(e: ev.AgentStarted) -> Lineage:
    """Where the run ``e`` starts comes from: a parent and no fork position is a child of
    it, both a fork of it, no parent a root."""
    return _lineage(e.parent_run_id, e.fork_position)


def _lineage(parent_run_id: str | None, fork_position: int | None) -> Lineage:
    if parent_run_id is None:
        return Root()
    return ChildOf(parent_run_id) if fork_position is None else ForkOf(parent_run_id, fork_position)


def lineage_kind(lineage: Lineage) -> LineageKind:
    """``root``, ``child`` or ``fork`` (as the run index, the runs view and the CLI name it)."""
    return _KINDS[type(lineage)]  # a lookup: every commit's index row names it


_KINDS = {Root: LineageKind.ROOT, ChildOf: LineageKind.CHILD, ForkOf: LineageKind.FORK}


class RunState(msgspec.Struct, frozen=True, omit_defaults=True):
    run_id: str = ""
    agent: str = ""
    status: RunStatus = RunStatus.NEW
    position: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    parent_run_id: str | None = None
    fork_position: int | None = None
    lineage: Lineage = Root()  # from agent_started
    calls: int = 0
    tool_calls: int = 0
    retries: int = 0
    failures: int = 0
    resumes: int = 0
    plan: list[str] = []
    steps_done: list[str] = []
    pending: list[PendingCall] = []
    waits_on: WaitingOn | None = None  # what a paused or waiting run waits on
    last_observation: str | None = None
    output: Any = None
    error: str | None = None
    compensated: int = 0
    # What its model calls reported using, summed (engine.policy.budget).
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    # Imported from a file and not adopted since, or a LangGraph thread: nothing here runs it.
    imported: bool = False
    dry_run: bool = False  # a dry-run fork, or a child of one (dry_run_started)
    # Trace contexts (W3C traceparent, from TraceNoted) tracing integrations read: the one
    # the run was started under (else its first execution's), and the last execution's.
    trace_origin: str | None = None
    trace: str | None = None

    @property
    def waiting(self) -> str | None:
        """What a paused or waiting run waits on, as people read it."""
        return None if self.waits_on is None else shown(self.waits_on)

    @property
    def wake_at(self) -> float | None:
        """When a waiting run's timer or receive deadline is due."""
        return deadline(self.waits_on)


# Snapshots before run_state:3 held what a run waits on as strings (waiting_on, waiting,
# wake_at) and no lineage: the upcaster of such a snapshot (a dict) reads the strings into
# ``waits_on`` and the lineage from the parent and fork position it kept.
LEGACY_WAITING = ("waiting", "waiting_on", "wake_at")


def upcast_snapshot(data: dict[str, Any]) -> dict[str, Any]:
    """An old snapshot's state (``run_state:1`` or ``:2``, decoded to a dict) in today's shape."""
    lifted = {k: v for k, v in data.items() if k not in LEGACY_WAITING}
    lifted["waits_on"] = from_legacy(data)
    lineage = _lineage(data.get("parent_run_id"), data.get("fork_position"))
    lifted["lineage"] = msgspec.to_builtins(lineage)
    return lifted


def observe(value: Any) -> str:
    """A bounded, readable rendering of a result for the state and recovery context."""
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    if len(text) > OBSERVATION_LIMIT:
        text = text[: OBSERVATION_LIMIT - 3] + "..."
    return text


def _without(pending: list[PendingCall], call: int) -> list[PendingCall]:
    return [p for p in pending if p.call != call]


# The status transition table: how each event moves a run's status; every other event
# leaves it. The one copy: evolve applies it, and the projections read it (next_status).
STATUS_AFTER: dict[type[ev.Event], RunStatus] = {
    ev.AgentStarted: RunStatus.RUNNING,
    ev.AgentResumed: RunStatus.RUNNING,
    ev.RunQueued: RunStatus.QUEUED,
    ev.RunDequeued: RunStatus.RUNNING,
    ev.HumanInputRequested: RunStatus.PAUSED,
    ev.HumanInputProvided: RunStatus.RUNNING,
    ev.AgentFinished: RunStatus.COMPLETED,
    ev.AgentFailed: RunStatus.FAILED,
    ev.AgentAbandoned: RunStatus.ABANDONED,
    ev.ChildPaused: RunStatus.PAUSED,
    ev.RunWaiting: RunStatus.WAITING,
    ev.RunHeld: RunStatus.HELD,
    ev.RunApproved: RunStatus.RUNNING,
    ev.DryRunEnded: RunStatus.DRY_RUN,
}


def next_status(status: str, event: ev.Event) -> str:
    """The status a run in ``status`` has after ``event`` (the table's rule)."""
    return STATUS_AFTER.get(type(event), status)


# One small handler per event type, found by the event's exact type: a dict lookup, not a
# chain of isinstance tests. Each takes the state with position, time and status already
# moved (the status by STATUS_AFTER).
_Handler = Callable[[RunState, Any, int], RunState]


def _started(s: RunState, e: ev.AgentStarted, position: int) -> RunState:
    return replace(
        s,
        agent=e.agent,
        started_at=e.at,
        parent_run_id=e.parent_run_id,
        fork_position=e.fork_position,
        lineage=lineage_of(e),
    )


def _traced(s: RunState, e: ev.TraceNoted, position: int) -> RunState:
    if e.origin:
        return replace(s, trace_origin=e.trace)
    return replace(s, trace=e.trace, trace_origin=s.trace_origin or e.trace)


def _resumed(s: RunState, e: ev.AgentResumed, position: int) -> RunState:
    return replace(
        s,
        resumes=s.resumes + 1,
        waits_on=None,
    )


def _child_paused(s: RunState, e: ev.ChildPaused, position: int) -> RunState:
    return replace(s, waits_on=of(e))


def _waits(s: RunState, e: ev.RunWaiting, position: int) -> RunState:
    return replace(s, waits_on=of(e))


def _invoked(s: RunState, e: ev.ToolInvoked, position: int) -> RunState:
    pend = PendingCall(e.call, e.tool, e.key, e.side_effect, position)
    return replace(
        s, calls=max(s.calls, e.call), tool_calls=s.tool_calls + 1, pending=[*s.pending, pend]
    )


def _succeeded(s: RunState, e: ev.ToolSucceeded, position: int) -> RunState:
    return replace(
        s,
        calls=max(s.calls, e.call),
        pending=_without(s.pending, e.call),
        last_observation=observe(e.result),
    )


def _tool_failed(s: RunState, e: ev.ToolFailed, position: int) -> RunState:
    call = answered(e)
    pending = s.pending if call is None else _without(s.pending, call)
    return replace(s, failures=s.failures + 1, pending=pending)


def _call(s: RunState, e: ev.StepStarted | ev.Checkpoint, position: int) -> RunState:
    return replace(s, calls=max(s.calls, e.call))


def _decided(s: RunState, e: ev.LlmDecided, position: int) -> RunState:
    s = _used(s, e, position)
    return replace(s, last_observation=observe(e.value))


def _used(s: RunState, e: ev.LlmDecided | ev.UsageRecorded, position: int) -> RunState:
    cost = s.cost if e.cost is None else (s.cost or 0.0) + e.cost
    return replace(
        s,
        calls=max(s.calls, e.call),
        tokens_in=s.tokens_in + e.tokens_in,
        tokens_out=s.tokens_out + e.tokens_out,
        cost=cost,
    )


def _planned(s: RunState, e: ev.PlanCreated, position: int) -> RunState:
    return replace(s, calls=max(s.calls, e.call), plan=list(e.steps))


def _step_done(s: RunState, e: ev.StepCompleted, position: int) -> RunState:
    done = [*s.steps_done, e.name][-RECENT_LIMIT:]
    return replace(s, calls=max(s.calls, e.call), steps_done=done)


def _asked(s: RunState, e: ev.HumanInputRequested, position: int) -> RunState:
    return replace(
        s,
        calls=max(s.calls, e.call),
        waits_on=of(e),
    )


def _finished(s: RunState, e: ev.AgentFinished, position: int) -> RunState:
    return replace(
        s,
        output=e.output,
        pending=[],
        error=None,
        waits_on=None,
    )


def _dry_ended(s: RunState, e: ev.DryRunEnded, position: int) -> RunState:
    return replace(s, output=e.output, pending=[], error=e.error, waits_on=None)


def _stopped(s: RunState, e: Any, position: int) -> RunState:
    """An event after which the run waits on nothing (a failure records its error)."""
    error = e.error if isinstance(e, ev.AgentFailed) else s.error
    return replace(s, error=error, waits_on=None)


_HANDLERS: dict[type[ev.Event], _Handler] = {
    ev.AgentStarted: _started,
    ev.AgentResumed: _resumed,
    ev.TraceNoted: _traced,
    ev.ToolInvoked: _invoked,
    ev.ToolSucceeded: _succeeded,
    ev.ToolFailed: _tool_failed,
    ev.RetryScheduled: lambda s, e, p: replace(s, retries=s.retries + 1),
    ev.LlmDecided: _decided,
    ev.UsageRecorded: _used,
    ev.PlanCreated: _planned,
    ev.StepStarted: _call,
    ev.StepCompleted: _step_done,
    ev.Checkpoint: _call,
    ev.HumanInputRequested: _asked,
    ev.HumanInputProvided: _stopped,
    ev.Compensated: lambda s, e, p: replace(s, compensated=s.compensated + 1),
    ev.AgentFinished: _finished,
    ev.DryRunEnded: _dry_ended,
    ev.DryRunStarted: lambda s, e, p: replace(s, dry_run=True),
    ev.AgentFailed: _stopped,
    ev.AgentAbandoned: _stopped,
    ev.ChildPaused: _child_paused,
    ev.RunWaiting: _waits,
    ev.RunImported: lambda s, e, p: replace(s, imported=True),
    ev.RunAdopted: lambda s, e, p: replace(s, imported=False, agent=e.agent),
    # A LangGraph thread, like an imported run, is history no engine executes: its graph
    # runs where LangGraph runs it (engine.integrations.langgraph), recover skips it.
    ev.GraphCheckpointed: lambda s, e, p: s if s.imported else replace(s, imported=True),
    ev.RunHeld: lambda s, e, p: replace(s, waits_on=Approval(e.reason)),
    ev.RunApproved: lambda s, e, p: replace(s, waits_on=None),
}


def evolve(state: RunState, event: ev.Event, position: int) -> RunState:
    """Fold one recorded event into the state. Pure; unknown events only move position."""
    kind = type(event)
    status = STATUS_AFTER.get(kind)
    if status is None:
        s = replace(state, position=position, updated_at=event.at)
    else:
        s = replace(state, position=position, updated_at=event.at, status=status)
    handler = _HANDLERS.get(kind)
    return s if handler is None else handler(s, event, position)


def fold(events: list[tuple[int, ev.Event]], state: RunState | None = None) -> RunState:
    """Fold ``(position, event)`` pairs onto ``state`` (a fresh state by default)."""
    s = state if state is not None else RunState()
    for position, event in events:
        s = evolve(s, event, position)
    return s
