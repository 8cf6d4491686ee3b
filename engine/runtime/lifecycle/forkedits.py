"""A fork's edits: the values it inherits from its parent, changed before it continues.

``set={NAME: value}`` replaces the recorded value of the named call the fork inherits (at
or before its fork point), as if it had been recorded so. A NAME is

- a decision's name (``run.decide("plan", ...)``: its value),
- a question's text (``run.ask("approve refund?")``: the answer given to it),
- a read-only tool's name (its result),

optionally followed by ``@POSITION`` (as ``timeline`` shows it) when the name is recorded
more than once. An unknown or ambiguous name, or a side-effecting tool's (its result is
the world's, not the log's), is refused naming the candidates. ``answer=`` answers the
question the inherited prefix ends on (or, when it ends before it, the first question the
fork asks). ``fork_edited`` records each edit (keyed hashes of
the old and the new value) and who made it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ... import codec
from ... import events as ev
from ...errors import UsageError
from ...kinds import Asked
from ...secrets import Seen, redact
from ...store import Recorded
from ..defs.definitions import ToolDef, args_hash, normalize

DECISION, ANSWER, TOOL, EFFECT = "decision", "answer", "tool", "effect"


class Candidate(msgspec.Struct, frozen=True):
    """A recorded value a fork may set: its ``kind``, ``name``, call, and the index (in the
    inherited records) and position of the event holding it."""

    kind: str
    name: str
    call: int
    index: int
    position: int

    def shown(self) -> str:
        what = "side-effecting tool" if self.kind == EFFECT else self.kind
        return f"{what} {self.name!r} at position {self.position}"


def candidates(kept: list[Recorded]) -> list[Candidate]:
    """The values among the inherited records ``kept`` that a name may pick, in log order."""
    asked: dict[int, ev.HumanInputRequested] = {}
    effects: set[int] = set()
    found: list[Candidate] = []
    for i, r in enumerate(kept):
        e, pos = r.event, r.position
        if isinstance(e, ev.HumanInputRequested):
            asked[e.call] = e
        elif isinstance(e, ev.ToolInvoked) and e.side_effect:
            effects.add(e.call)
        elif isinstance(e, ev.LlmDecided):
            found.append(Candidate(DECISION, e.name, e.call, i, pos))
        elif isinstance(e, ev.ToolSucceeded):
            kind = EFFECT if e.call in effects else TOOL
            found.append(Candidate(kind, e.tool, e.call, i, pos))
        elif isinstance(e, ev.HumanInputProvided) and e.call in asked:
            q = asked[e.call]
            if q.reason == Asked.QUESTION:
                found.append(Candidate(ANSWER, q.question, e.call, i, pos))
    return found


def pick(name: str, found: list[Candidate], target: int) -> Candidate:
    """The one candidate ``name`` (``NAME`` or ``NAME@POSITION``) names; UsageError else."""
    matches = [c for c in found if c.name == name]
    base, _, at = name.rpartition("@")
    if not matches and base and at.isdigit():
        matches = [c for c in found if c.name == base and c.position == int(at)]
    settable = [c for c in matches if c.kind != EFFECT]
    if len(settable) == 1:
        return settable[0]
    listed = "; ".join(c.shown() for c in (matches or found)) or "none"
    if not matches:
        raise UsageError(
            f"nothing named {name!r} is recorded up to the fork point (position {target}) "
            f"to set: candidates: {listed}"
        )
    if not settable:
        raise UsageError(
            f"{name!r} is a side-effecting tool: its result cannot be set (the effect "
            f"happened in the world); rewind to before it instead ({listed})"
        )
    raise UsageError(f"{name!r} is ambiguous: {listed}; set NAME@POSITION to pick one")


def _with_value(e: ev.Event, value: Any) -> tuple[ev.Event, Any]:
    """The event holding the value, with ``value`` instead; and the value it held."""
    if isinstance(e, ev.LlmDecided):
        return msgspec.structs.replace(e, value=value), e.value
    if isinstance(e, ev.ToolSucceeded):
        return msgspec.structs.replace(e, result=value), e.result
    assert isinstance(e, ev.HumanInputProvided)
    return msgspec.structs.replace(e, value=value), e.value


def apply(
    kept: list[Recorded],
    values: Mapping[str, Any],
    target: int,
    key: bytes,
    tool_of: Callable[[str], ToolDef | None] = lambda name: None,
) -> tuple[list[ev.Event], list[ev.Edit]]:
    """The inherited events with ``values`` set by name, and the edits made; a read-only
    tool's new result (``tool_of(name)``: its definition, None if unknown) must fit the
    type the tool declares and is redacted with the tool's own secret names, as its
    recorded results are."""
    events = [r.event for r in kept]
    found = candidates(kept)
    edits: list[ev.Edit] = []
    for name, value in values.items():
        c = pick(str(name), found, target)
        what = f"the value set for {name!r}"
        new = normalize(value, what)
        tool = tool_of(c.name) if c.kind == TOOL else None
        new = redact(new, seen=Seen()) if tool is None else tool.redacted(new, Seen())
        if tool is not None:  # a tool's result replays as it is: checked here, not there
            codec.typed(new, tool.returns, what, live=True)
        events[c.index], old = _with_value(events[c.index], new)
        edits.append(_edit(c, old, new, key))
    return events, edits


def _edit(c: Candidate, old: Any, new: Any, key: bytes) -> ev.Edit:
    return ev.Edit(
        kind=c.kind,
        name=c.name,
        call=c.call,
        position=c.position,
        old_hash=args_hash(c.name, old, key),
        new_hash=args_hash(c.name, new, key),
    )


def question_at(
    recorded: list[Recorded], target: int | None
) -> tuple[int, ev.HumanInputRequested] | None:
    """The question a fork with ``answer=`` answers at its start: the parent's last one
    (``target`` None; UsageError if it asked none), or the one the prefix up to ``target``
    ends on, unanswered there (None if it ends on none: the fork's first question then
    takes the answer); its position with it."""
    upto = recorded if target is None else recorded[:target]
    answered = {r.event.call for r in upto if isinstance(r.event, ev.HumanInputProvided)}
    for r in reversed(upto):
        e = r.event
        if isinstance(e, ev.HumanInputRequested):
            if target is not None and e.call in answered:
                return None
            return r.position, e
    if target is None:
        raise UsageError("the run asked no question to answer: rewind with --to")
    return None


def answer_event(asked: ev.HumanInputRequested, value: Any, at: float) -> ev.HumanInputProvided:
    """The fork's answer to ``asked`` (dated ``at``), recorded as an answer to the run would
    be."""
    if asked.reason != Asked.QUESTION:  # inside a call: the fork would send it again
        raise UsageError(
            f"call {asked.call} asks whether an effect happened: answer the run itself "
            "(agentlog answer), a fork cannot"
        )
    value = redact(normalize(value, "the answer"), seen=Seen())
    return ev.HumanInputProvided(at=at, call=asked.call, value=value)


def answer_edit(asked: ev.HumanInputRequested, position: int, answered: Any, key: bytes) -> ev.Edit:
    c = Candidate(ANSWER, asked.question, asked.call, 0, position)
    return _edit(c, None, answered.value, key)


def later_edit(question: str, call: int, position: int, value: Any, key: bytes) -> ev.Edit:
    """The edit of an answer given to the first question a fork asked (``question``, at
    ``call``; ``position``: where the fork paused)."""
    c = Candidate(ANSWER, question, call, 0, position)
    return _edit(c, None, normalize(value, "the answer"), key)


__all__ = [
    "Candidate",
    "answer_edit",
    "answer_event",
    "apply",
    "candidates",
    "later_edit",
    "pick",
    "question_at",
]
