"""What a stopped run waits on: one tagged type, built by the fold from the event that
stopped the run (:func:`of`), read by type everywhere, shown to people by :func:`shown`.

A run waits on a timer, a message on a topic (with an optional deadline), a child run (a
parent suspended on it, or paused by a question a descendant asks), or a person's answer
(or, for a held run, a person's approval).
A lock is waited for in the run's own thread, so no lock wait is ever recorded.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from .. import events as ev


class Timer(msgspec.Struct, frozen=True, tag="timer"):
    """A durable timer (``run.sleep``) due at ``until``."""

    until: float | None = None


class Message(msgspec.Struct, frozen=True, tag="message"):
    """A message on ``topic`` (``run.recv``), or its deadline ``until``."""

    topic: str
    until: float | None = None


class Child(msgspec.Struct, frozen=True, tag="child"):
    """The child run ``run_id``: suspended until it moves, or (``asking_run_id`` set)
    paused because that run, the child or a descendant, asks ``question``."""

    run_id: str
    asking_run_id: str | None = None
    question: str | None = None


class Person(msgspec.Struct, frozen=True, tag="person"):
    """A person's answer to ``question`` (``run.ask``, or an uncertain call's question)."""

    question: str


class Approval(msgspec.Struct, frozen=True, tag="approval"):
    """A person's approval of a held run (crashed, its agent resumes on approval)."""

    reason: str = ""


WaitingOn = Timer | Message | Child | Person | Approval
Stops = ev.RunWaiting | ev.ChildPaused | ev.HumanInputRequested


def of(e: Stops) -> WaitingOn:
    """What the run waits on once ``e`` is recorded (a reason no code writes reads as a
    timer: it waits until ``until``)."""
    if isinstance(e, ev.HumanInputRequested):
        return Person(e.question)
    if isinstance(e, ev.ChildPaused):
        return Child(e.child_run_id, e.asking_run_id, e.question)
    if e.reason == "child":
        return Child(e.child_run_id or "")
    if e.reason == "message":
        return Message(e.topic or "", e.until)
    return Timer(e.until)


def deadline(on: WaitingOn | None) -> float | None:
    """When a wait is due by itself (a timer, a receive's timeout); None: only news ends it."""
    return on.until if isinstance(on, Timer | Message) else None


def asks(on: WaitingOn | None) -> tuple[str, str] | None:
    """The run that asks and its question, when ``on`` is a paused child's question."""
    if isinstance(on, Child) and on.asking_run_id is not None and on.question is not None:
        return on.asking_run_id, on.question
    return None


def shown(on: WaitingOn) -> str:
    """What the run waits on, as people read it (``RunResult.waiting``, the CLI, views)."""
    if isinstance(on, Person):
        return on.question
    if isinstance(on, Approval):
        return f"approval ({on.reason})" if on.reason else "approval"
    if isinstance(on, Child):
        if on.asking_run_id is None:
            return f"child {on.run_id}"
        return f"child {on.asking_run_id} asks: {on.question}"
    what = "timer" if isinstance(on, Timer) else f"message {on.topic!r}"
    return what + _until(on.until)


def _until(at: float | None) -> str:
    if at is None:
        return ""
    return " until " + dt.datetime.fromtimestamp(at, tz=dt.UTC).isoformat(timespec="seconds")


def from_legacy(data: dict[str, Any]) -> Any:
    """The builtins of what an old snapshot's state (``run_state:1``/``:2``, a dict) waits
    on, read from its string form: ``waiting_on`` "timer", "message:<topic>" or
    "child:<run id>" beside ``wake_at``, or None with the question in ``waiting``."""
    on, text, until = data.get("waiting_on"), data.get("waiting"), data.get("wake_at")
    found: WaitingOn | None = None
    if not isinstance(on, str):
        found = None if text is None else Person(str(text))
    elif on.startswith("child:"):
        found = _legacy_child(on.removeprefix("child:"), text)
    elif on.startswith("message:"):
        found = Message(on.removeprefix("message:"), until)
    else:
        found = Timer(until)
    return msgspec.to_builtins(found)


def _legacy_child(run_id: str, text: object) -> Child:
    """A paused parent's text was "child <asking run> asks: <question>"."""
    head, sep, question = str(text).partition(" asks: ")
    if not sep or not head.startswith("child "):
        return Child(run_id)
    return Child(run_id, head.removeprefix("child "), question)
