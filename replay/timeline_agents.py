"""The timeline's lines for the events of many agents: child runs (spawned, finished,
paused, restarted), supervisors giving up, cross-agent locks, messages and durable
timers, a run that stops to wait; a patch a run took (``run.patched``), and graded
recovery's choices. Each renderer takes the event and its time and returns the line's
pieces (the narrator's memory is not needed for these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import events as ev
from engine.kinds import Purpose, RunStatus
from engine.log.waiting import of, shown

from .output import Piece, brief, clock, plural, seconds


def _spawned(e: ev.ChildSpawned, at: float) -> list[Piece]:
    return [
        ("⑂ spawned child ", "bold cyan"),
        (e.child_run_id, "cyan"),
        f" {e.agent}",
        (f"  call {e.call}", "dim"),
    ]


def _child_finished(e: ev.ChildFinished, at: float) -> list[Piece]:
    if e.status == RunStatus.COMPLETED:
        return [("⑂ child ", "green"), e.child_run_id, " completed → ", brief(e.output, 100)]
    out: list[Piece] = [("⑂ child ", "red"), e.child_run_id, (f" {e.status}", "bold red")]
    if e.error:
        out.append((f": {e.error}", "red"))
    return out


def _child_paused(e: ev.ChildPaused, at: float) -> list[Piece]:
    who = "" if e.asking_run_id == e.child_run_id else f" (its descendant {e.asking_run_id})"
    return [("? child ", "bold yellow"), e.child_run_id, f"{who} asks: ", e.question]


def _restarted(e: ev.ChildRestarted, at: float) -> list[Piece]:
    again = (
        " (resumed from its log)"
        if e.child_run_id == e.previous_run_id
        else f" as {e.child_run_id}"
    )
    return [
        ("↻ restarted child ", "bold yellow"),
        e.previous_run_id,
        again,
        (f"  {e.strategy}, restart {e.restarts}: ", "dim"),
        e.reason,
    ]


def _escalated(e: ev.SupervisorEscalated, at: float) -> list[Piece]:
    return [
        ("⚠ supervisor gave up ", "bold red"),
        f"on child {e.child_run_id} after {plural(e.restarts, 'restart')}: ",
        (e.reason, "red"),
    ]


def _locked(e: ev.LockAcquired, at: float) -> list[Piece]:
    ttl = f", lease {seconds(e.ttl)}" if e.ttl else ""
    return [("⚿ lock ", "bold"), (repr(e.name), "bold"), f" acquired, fence {e.fence}{ttl}"]


def _unlocked(e: ev.LockReleased, at: float) -> list[Piece]:
    return [("⚿ lock ", "dim"), repr(e.name), f" released (fence {e.fence})"]


def _sent(e: ev.MessageSent, at: float) -> list[Piece]:
    return [
        ("✉ sent ", "bold"),
        repr(e.topic),
        " to ",
        (e.to_run_id, "cyan"),
        (f"  message {e.message_id}", "dim"),
    ]


def _posted(e: ev.MessagePosted, at: float) -> list[Piece]:
    return [("✉ posted ", "dim"), repr(e.topic), f" from {e.from_run_id} → ", brief(e.value)]


def _received(e: ev.MessageReceived, at: float) -> list[Piece]:
    if e.message_id is None:
        return [("✉ no message ", "yellow"), f"on {e.topic!r}: the wait timed out"]
    return [
        ("✉ received ", "bold"),
        repr(e.topic),
        " → ",
        brief(e.value),
        (f"  message {e.message_id}", "dim"),
    ]


def _timer(e: ev.TimerSet, at: float) -> list[Piece]:
    what = "sleep" if e.purpose == Purpose.SLEEP else f"wait for message {e.topic!r}"
    return [
        ("⏲ timer ", "bold"),
        f"{what} until {clock(e.until, date=True)} UTC",
        (f"  ({seconds(max(0.0, e.until - at))} from then)", "dim"),
    ]


def _recovery(e: ev.RecoveryDecided, at: float) -> list[Piece]:
    return [
        ("⟲ recovery ", "bold yellow"),
        (f"{e.action}", "bold"),
        f" after a {e.kind} failure (attempt {e.attempt}, from {e.from_position}): ",
        e.reason,
    ]


def _waiting(e: ev.RunWaiting, at: float) -> list[Piece]:
    return [("⏸ waiting ", "bold magenta"), f"for {shown(of(e))}", ("  (no thread held)", "dim")]


def _patched(e: ev.PatchMarked, at: float) -> list[Piece]:
    return [("⚑ patch ", "bold"), repr(e.name), (f"  taken after call {e.after}", "dim")]


def _edited(e: ev.ForkEdited, at: float) -> list[Piece]:
    what = ", ".join(f"{x.kind} {x.name!r} (position {x.position})" for x in e.edits)
    return [("✎ fork edited ", "bold yellow"), what, (f"  by {e.by}", "dim")]


def _would_send(e: ev.WouldSend, at: float) -> list[Piece]:
    stop = [(" (the dry run stops here)", "yellow")] if e.stopped else []
    return [("⊘ would send ", "bold cyan"), f"{e.tool} {brief(e.args, 100)} (key {e.key})", *stop]


def _dry_ended(e: ev.DryRunEnded, at: float) -> list[Piece]:
    ended = brief(e.output, 100) if e.error is None else (e.error, "yellow")
    return [("■ dry run ended", "bold cyan"), " → ", ended]


Render = Callable[[Any, float], list[Piece]]

RENDER: dict[type[ev.Event], Render] = {
    ev.ChildSpawned: _spawned,
    ev.ChildFinished: _child_finished,
    ev.ChildPaused: _child_paused,
    ev.ChildRestarted: _restarted,
    ev.SupervisorEscalated: _escalated,
    ev.LockAcquired: _locked,
    ev.LockReleased: _unlocked,
    ev.MessageSent: _sent,
    ev.MessagePosted: _posted,
    ev.MessageReceived: _received,
    ev.TimerSet: _timer,
    ev.RunWaiting: _waiting,
    ev.PatchMarked: _patched,
    ev.ForkEdited: _edited,
    ev.DryRunStarted: lambda e, at: [("◇ dry run", "bold cyan"), ": no side effect is sent"],
    ev.WouldSend: _would_send,
    ev.DryRunEnded: _dry_ended,
    ev.RecoveryDecided: _recovery,
}
