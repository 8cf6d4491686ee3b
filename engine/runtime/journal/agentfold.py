"""The journal's fold of the calls of many agents: spawn, lock, send, receive, sleep.

Each is a call identity like a tool call, folded into a :class:`CallState` (``kind`` is
``spawn``, ``lock``, ``send``, ``recv`` or ``sleep``), so re-execution checks it against
the code (``RunContext.recorded``) and returns what was recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from ... import events as ev
from ...kinds import Purpose
from ...log.effects import SEND
from .callstate import CallState

_Fold = Callable[[CallState | None, Any], CallState | None]


def _spawned(s: CallState | None, e: ev.ChildSpawned) -> CallState:
    ref = e.child_run_id
    return CallState("spawn", e.agent, e.args_hash, started_at=e.at, ref=ref, spawned=ref)


def _child_finished(s: CallState | None, e: ev.ChildFinished) -> CallState | None:
    if s is None or s.ref != e.child_run_id:  # an older child's end, after a restart
        return s
    return replace(s, outcome=e, completed=True)


def _restarted(s: CallState | None, e: ev.ChildRestarted) -> CallState | None:
    return None if s is None else replace(s, ref=e.child_run_id, outcome=None, completed=False)


def _locked(s: CallState | None, e: ev.LockAcquired) -> CallState:
    return CallState("lock", e.name, outcome=e, started_at=e.at, fence=e.fence)


def _unlocked(s: CallState | None, e: ev.LockReleased) -> CallState | None:
    return None if s is None else replace(s, completed=True)


def _timer(s: CallState | None, e: ev.TimerSet) -> CallState:
    kind = "recv" if e.purpose == Purpose.RECV else "sleep"
    name = (e.topic or "") if kind == "recv" else ""
    return CallState(kind, name, e.args_hash, started_at=e.at, until=e.until)


def _received(s: CallState | None, e: ev.MessageReceived) -> CallState:
    s = s or CallState("recv", e.topic, started_at=e.at)
    return replace(s, outcome=e, completed=True, ref=e.message_id)


def _would_send(s: CallState | None, e: ev.WouldSend) -> CallState:
    """A dry run's would-be effect, its outcome (None, or the fork stopped there): a tool
    call's, or a ``run.send``'s (named by its topic, as a send is)."""
    if e.tool == SEND:
        return CallState("send", str(e.args.get("topic", "")), e.args_hash, outcome=e)
    return CallState(
        "tool", e.tool, e.args_hash, outcome=e, completed=True, parent_call=e.parent_call
    )


FOLDS: dict[type[Any], _Fold] = {
    ev.ChildSpawned: _spawned,
    ev.ChildFinished: _child_finished,
    ev.ChildRestarted: _restarted,
    ev.LockAcquired: _locked,
    ev.LockReleased: _unlocked,
    ev.MessageSent: lambda s, e: CallState(
        "send", e.topic, e.args_hash, outcome=e, ref=e.message_id, parent_call=e.parent_call
    ),
    ev.TimerSet: _timer,
    ev.MessageReceived: _received,
    ev.WouldSend: _would_send,
}


def evolve(state: CallState | None, event: ev.Event) -> CallState | None:
    """``state`` with ``event`` (a call event of many agents) folded in."""
    fold = FOLDS.get(type(event))
    return state if fold is None else fold(state, event)
