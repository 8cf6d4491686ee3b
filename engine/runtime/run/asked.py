"""Typed answers: ``run.ask(question, returns=T)`` gives a person's answer back as ``T``,
live and on replay. ``engine.answer`` offers the answer to the paused run's replay first
(:func:`offering`): one that does not fit ``T`` is refused before anything is recorded, and
so is a result given for an uncertain effect that does not fit the tool's return type."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from ... import codec
from ... import events as ev
from ...errors import Paused, RunInterrupt, UsageError
from ..journal.callstate import AFFIRMATIVE, NEGATIVE

# The answer engine.answer is about to record: (run id, its event).
_offered: contextvars.ContextVar[tuple[str, ev.HumanInputProvided] | None] = contextvars.ContextVar(
    "agentlog_offered_answer", default=None
)


class Given(msgspec.Struct, frozen=True):
    """An answer given as a value, not a word (``agentlog answer --json-value``): to a
    question it is the answer; to an uncertain effect it is the result the effect had."""

    value: Any


class _Unfit(RunInterrupt):
    """The offered answer does not fit the type the question declares (agent code must
    not swallow it: it unwinds the checking replay to :func:`offering`)."""


def note(unanswered: dict[int, ev.HumanInputRequested], events: Sequence[ev.Event]) -> None:
    """Keep ``unanswered`` (call -> the question waiting, newest last) up with ``events``."""
    for e in events:
        if isinstance(e, ev.HumanInputRequested):
            unanswered.pop(e.call, None)
            unanswered[e.call] = e
        elif isinstance(e, ev.HumanInputProvided):
            unanswered.pop(e.call, None)


def answered(value: Any, returns: Any, question: str) -> Any:
    """The recorded answer ``value`` to ``question`` as ``returns`` (None: as recorded);
    a recorded answer that no longer fits the declared type is a divergence."""
    return codec.typed(value, returns, f"the answer to {question!r}")


def paused(run_id: str, call: int, question: str, returns: Any, *, verify: bool) -> Paused:
    """The pause of run ``run_id``'s ``ask`` at ``call``, not answered yet. While
    ``engine.answer`` checks the answer it is about to record there (a ``verify`` replay,
    which writes nothing), an answer that does not fit ``returns`` stops it instead."""
    offered = _offered.get()
    if returns is not None and offered is not None and verify:
        rid, given = offered
        if (rid, given.call) == (run_id, call):
            try:
                codec.typed(given.value, returns, f"the answer to {question!r}", live=True)
            except UsageError as e:
                raise _Unfit(str(e) + _hint(given.value, returns)) from None
    return Paused(question)


def _hint(value: Any, returns: Any) -> str:
    """What to answer instead of a yes/no word to a question that wants a bool."""
    words = AFFIRMATIVE | NEGATIVE
    if returns is bool and isinstance(value, str) and value.strip().lower() in words:
        truth = "true" if value.strip().lower() in AFFIRMATIVE else "false"
        return f"; answer {truth} with --json-value (engine.answer(run_id, {truth.title()}))"
    return ""


def check_result(run_id: str, call: int, tool: str, returns: Any) -> None:
    """While ``engine.answer`` checks the answer it is about to record to the uncertain
    effect of ``tool`` at ``call`` (a ``verify`` replay reaching it), a result that does
    not fit the tool's return type ``returns`` (a bare "done" gives None) stops it."""
    offered = _offered.get()
    if returns is not None and offered is not None:
        rid, given = offered
        if (rid, given.call) == (run_id, call) and given.confirmed is True:
            try:
                codec.typed(given.value, returns, f"the result of {tool}", live=True)
            except UsageError as e:
                message = str(e)
                if given.value is None:
                    message = (
                        f"{tool} returns {codec.type_name(returns)}: 'done' alone gives it "
                        "no result; pass the result it had with --json-value JSON"
                    )
                raise _Unfit(message) from None


@contextlib.contextmanager
def offering(run_id: str, given: ev.HumanInputProvided) -> Iterator[None]:
    """Replays of ``run_id`` in the block check ``given`` as the answer to its call:
    UsageError (naming the declared type) when it does not fit."""
    token = _offered.set((run_id, given))
    try:
        yield
    except _Unfit as e:
        raise UsageError(str(e)) from None
    finally:
        _offered.reset(token)


def uncertain_answer(call: int, value: object, *, given: bool, at: float) -> ev.HumanInputProvided:
    """A person's word on an uncertain effect, as it is recorded (at ``at``): 'not done'
    (it is sent again), 'done' (it happened, with no result: None), or, ``given`` as a
    value or any value that is not a word, the result the effect had. Any other word is
    refused: it would be taken as 'not done' and re-send an effect that may be done."""
    if given or not isinstance(value, str | bool):
        return ev.HumanInputProvided(at=at, call=call, value=value, confirmed=True)
    word = str(value).strip().lower()
    if word in NEGATIVE:
        return ev.HumanInputProvided(at=at, call=call, value=value)
    if word in AFFIRMATIVE:
        return ev.HumanInputProvided(at=at, call=call, value=None, confirmed=True)
    raise UsageError(
        f"answer {value!r} does not say whether the effect happened: answer 'done' or "
        "'not done', or give the result it had with --json-value (or abandon the run)"
    )


__all__ = ["Given", "answered", "check_result", "offering", "paused", "uncertain_answer"]
