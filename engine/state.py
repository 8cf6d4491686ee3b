"""RunState and the pure fold ``evolve(state, event, position) -> state``.

The fold does no I/O and never raises; tools and models run elsewhere and only their
recorded results enter it. RunState stays bounded by the run's working state (no call
journal, no checkpoint list, no copy of the input) so a snapshot does not grow with the
run and a rebuild is snapshot + tail. Checkpoints are an index of positions by name read
from the log (``engine.history.checkpoints``); the input lives once, in ``agent_started``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from . import events as ev

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


class RunState(msgspec.Struct, frozen=True, omit_defaults=True):
    run_id: str = ""
    agent: str = ""
    status: str = "new"  # new, running, paused, completed, failed, abandoned
    position: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    parent_run_id: str | None = None
    fork_position: int | None = None
    calls: int = 0
    tool_calls: int = 0
    retries: int = 0
    failures: int = 0
    resumes: int = 0
    plan: list[str] = []
    steps_done: list[str] = []
    pending: list[PendingCall] = []
    waiting: str | None = None
    last_observation: str | None = None
    output: Any = None
    error: str | None = None
    compensated: int = 0
    # Imported from a file and not adopted since: nothing runs it (see engine.adopt).
    imported: bool = False


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


def evolve(state: RunState, event: ev.Event, position: int) -> RunState:
    """Fold one recorded event into the state. Pure; unknown events only move position."""
    s = replace(state, position=position, updated_at=event.at)
    match event:
        case ev.AgentStarted():
            return replace(
                s,
                agent=event.agent,
                status="running",
                started_at=event.at,
                parent_run_id=event.parent_run_id,
                fork_position=event.fork_position,
            )
        case ev.AgentResumed():
            return replace(s, status="running", resumes=s.resumes + 1, waiting=None)
        case ev.ToolInvoked():
            pend = PendingCall(event.call, event.tool, event.key, event.side_effect, position)
            return replace(
                s,
                calls=max(s.calls, event.call),
                tool_calls=s.tool_calls + 1,
                pending=[*s.pending, pend],
            )
        case ev.ToolSucceeded():
            return replace(
                s,
                calls=max(s.calls, event.call),
                pending=_without(s.pending, event.call),
                last_observation=observe(event.result),
            )
        case ev.ToolFailed():
            pending = _without(s.pending, event.call) if event.final else s.pending
            return replace(s, failures=s.failures + 1, pending=pending)
        case ev.RetryScheduled():
            return replace(s, retries=s.retries + 1)
        case ev.LlmDecided():
            return replace(s, calls=max(s.calls, event.call), last_observation=observe(event.value))
        case ev.PlanCreated():
            return replace(s, calls=max(s.calls, event.call), plan=list(event.steps))
        case ev.StepStarted():
            return replace(s, calls=max(s.calls, event.call))
        case ev.StepCompleted():
            done = [*s.steps_done, event.name][-RECENT_LIMIT:]
            return replace(s, calls=max(s.calls, event.call), steps_done=done)
        case ev.Checkpoint():
            return replace(s, calls=max(s.calls, event.call))
        case ev.HumanInputRequested():
            return replace(
                s, calls=max(s.calls, event.call), status="paused", waiting=event.question
            )
        case ev.HumanInputProvided():
            return replace(s, status="running", waiting=None)
        case ev.Compensated():
            return replace(s, compensated=s.compensated + 1)
        case ev.AgentFinished():
            return replace(
                s, status="completed", output=event.output, pending=[], error=None, waiting=None
            )
        case ev.AgentFailed():
            return replace(s, status="failed", error=event.error, waiting=None)
        case ev.AgentAbandoned():
            return replace(s, status="abandoned", waiting=None)
        case ev.RunImported():
            return replace(s, imported=True)
        case ev.RunAdopted():
            return replace(s, imported=False, agent=event.agent)
        case _:
            return s


def fold(events: list[tuple[int, ev.Event]], state: RunState | None = None) -> RunState:
    """Fold ``(position, event)`` pairs onto ``state`` (a fresh state by default)."""
    s = state if state is not None else RunState()
    for position, event in events:
        s = evolve(s, event, position)
    return s
