"""A durable call as a tiny event-sourced aggregate: its state, ``evolve`` and ``decide``.

``CallState`` is what a call's own events say of it (intent, attempts, claim, outcome, a
person's answer); ``evolve`` folds one event into it. ``decide`` says what happens next
given what was just observed: attempt, retry after a backoff, verify, re-send under the
same key, ask a person, pause, fall back, done or fail. Nothing here does I/O or raises:
the call driver (``runtime.call.drive``) carries the decisions out, for sync and async tools alike.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, overload

import msgspec
from msgspec.structs import replace

from ... import events as ev
from ...kinds import Asked, FailureKind, Source
from ...log.effects import doubt_after, is_uncertain, may_have_landed
from ..defs.definitions import ToolDef

# The structs below hold events and plain values, never themselves: the cycle collector
# need not track them (gc=False), which makes the hot path's many small ones cheaper.
AFFIRMATIVE = {"done", "yes", "y", "true", "1", "happened"}
NEGATIVE = {"not done", "no", "n", "false", "0", "not happened", "did not happen"}
INDETERMINATE, TRANSIENT = FailureKind.INDETERMINATE, FailureKind.TRANSIENT


class CallState(msgspec.Struct, frozen=True, gc=False):
    """What the log (and, live, the ledger) says of one call identity."""

    kind: str  # tool, decide, usage, plan, step, checkpoint, ask
    name: str
    args_hash: str = ""
    intent: ev.ToolInvoked | None = None  # its intent, once written
    outcome: ev.Event | None = None  # ToolSucceeded, final ToolFailed, LlmDecided, ...
    attempts: int = 0  # attempts made so far (failed ones and the outcome's)
    started_at: float = 0.0
    completed: bool = False  # a step's step_completed, an ask's answer
    asked: bool = False  # an uncertain tool call waits for a person
    answer: Any = None
    confirmed: bool = False  # the answer confirms an uncertain effect: it is the result
    key: str | None = None  # the business key (side effects): the ledger's stream
    sent_key: str | None = None  # the key the request goes out under, if not ``key``
    parent_call: int | None = None  # a fork taking over its parent's effect at this call
    parent_run: str | None = None  # whose call that is, if not the fork's parent's
    claim: int = 0  # the ledger version of this call's claim on its business key
    maybe_landed: bool = False  # an attempt's outcome was unknown: the effect may exist
    # Calls of many agents (runtime.agentfold): the child run a spawn started (or its
    # restart), a lock's fencing token, a sleep's or a receive's deadline.
    ref: str | None = None
    spawned: str | None = None  # the child run the spawn started (``ref`` before restarts)
    fence: int = 0
    until: float | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.name!r}"

    @property
    def unresolved(self) -> bool:
        """Its intent went out and the log does not say how it ended (no outcome, or a
        final failure while an attempt may have landed: an ``indeterminate`` one, or an
        earlier one): a re-execution resolves it (ledger, verifier, same-key re-send or
        a person) before anything is sent again. By the one rule every reader of the
        question uses, ``engine.log.effects.is_uncertain``."""
        out, failed = self.outcome, isinstance(self.outcome, ev.ToolFailed)
        unsure = is_uncertain(
            answered=out is not None, failed=failed, maybe_landed=self.maybe_landed
        )
        return self.intent is not None and unsure

    @property
    def sends_under(self) -> str | None:
        """The idempotency key the tool, its verifier and its compensation receive."""
        return self.sent_key or self.key

    def attempted(self) -> CallState:
        """An attempt went out (the log records how it ended)."""
        return replace(self, attempts=self.attempts + 1)


# --- evolve: one event into the state ------------------------------------------------

_Fold = Callable[[CallState | None, Any, int], CallState | None]


def _invoked(s: CallState | None, e: ev.ToolInvoked, position: int) -> CallState:
    # A new intent (a re-attempt, a re-send after a person said "not done") starts the
    # call afresh; attempts carry on, and so do a live call's claim and doubt.
    return CallState(
        "tool",
        e.tool,
        e.args_hash,
        intent=e,
        attempts=s.attempts if s else 0,
        started_at=e.at,
        key=e.key,
        sent_key=e.sent_key,
        parent_call=e.parent_call,
        parent_run=e.parent_run,
        claim=s.claim if s else 0,
        maybe_landed=s.maybe_landed if s else False,
    )


def _succeeded(s: CallState | None, e: ev.ToolSucceeded, position: int) -> CallState:
    s = s or CallState("tool", e.tool)
    return replace(s, outcome=e, attempts=max(s.attempts, e.attempt))


def _failed(s: CallState | None, e: ev.ToolFailed, position: int) -> CallState:
    s = s or CallState("decide" if e.decision else "tool", e.tool, e.args_hash)
    return replace(
        s,
        outcome=e if e.final else s.outcome,
        attempts=max(s.attempts, e.attempt),
        maybe_landed=doubt_after(s.maybe_landed, e),
    )


def _claimed(s: CallState | None, e: ev.EffectClaimed, position: int) -> CallState | None:
    return None if s is None else replace(s, claim=position)  # position in the key stream


def _asked(s: CallState | None, e: ev.HumanInputRequested, position: int) -> CallState:
    if e.reason == Asked.UNCERTAIN and s is not None:
        return replace(s, asked=True)  # a tool call paused for a person's word
    return CallState("ask", e.question, outcome=e)


def _answered(s: CallState | None, e: ev.HumanInputProvided, position: int) -> CallState | None:
    if s is None:
        return None
    return replace(s, completed=True, answer=e.value, confirmed=e.confirmed is True)


def _step_done(s: CallState | None, e: ev.StepCompleted, position: int) -> CallState | None:
    return None if s is None else replace(s, completed=True)


_FOLDS: dict[type[Any], _Fold] = {
    ev.ToolInvoked: _invoked,
    ev.ToolSucceeded: _succeeded,
    ev.ToolFailed: _failed,
    ev.EffectClaimed: _claimed,
    ev.HumanInputRequested: _asked,
    ev.HumanInputProvided: _answered,
    ev.StepCompleted: _step_done,
    ev.LlmDecided: lambda s, e, p: CallState(
        "decide", e.name, e.args_hash, outcome=e, attempts=max(s.attempts if s else 0, e.attempt)
    ),
    ev.UsageRecorded: lambda s, e, p: CallState("usage", "usage", outcome=e),
    ev.PlanCreated: lambda s, e, p: CallState("plan", ",".join(e.steps), outcome=e),
    ev.StepStarted: lambda s, e, p: CallState("step", e.name, outcome=e, started_at=e.at),
    ev.Checkpoint: lambda s, e, p: CallState("checkpoint", e.name, outcome=e),
}
CALL_EVENTS = frozenset(_FOLDS) - {ev.EffectClaimed}  # the run-stream events folded per call


@overload
def evolve(state: CallState, event: ev.Event, position: int = 0) -> CallState: ...
@overload
def evolve(state: CallState | None, event: ev.Event, position: int = 0) -> CallState | None: ...
def evolve(state: CallState | None, event: ev.Event, position: int = 0) -> CallState | None:
    """``state`` with ``event`` (at ``position`` of its stream) folded in; None while
    nothing is known of the call. Never raises; other events leave it as it is."""
    fold = _FOLDS.get(type(event))
    return state if fold is None else fold(state, event, position)


def resumed(entry: CallState, key: str | None) -> CallState:
    """A recorded intent with no outcome, made again: it may have landed; the request
    went out under the recorded key, even if the code now derives another."""
    return replace(entry, key=entry.key or key, maybe_landed=True)


def retried(entry: CallState, key: str | None) -> CallState:
    """The call whose failure ended the run, made again: a fresh intent, attempts go on."""
    return CallState("tool", entry.name, entry.args_hash, attempts=entry.attempts, key=key)


# --- observations: what the driver saw ----------------------------------------------


class Returned(msgspec.Struct, frozen=True, gc=False):
    """The attempt returned ``value``."""

    value: Any
    duration: float


class Failed(msgspec.Struct, frozen=True, gc=False):
    """The attempt failed (``elapsed``: since the first attempt of this series)."""

    kind: FailureKind
    message: str
    elapsed: float


class CircuitOpen(msgspec.Struct, frozen=True, gc=False):
    """The tool's breaker refused the attempt."""


class NoBudget(msgspec.Struct, frozen=True, gc=False):
    """A retry of a failure of ``kind`` was refused by a retry budget (``reason``)."""

    kind: FailureKind
    message: str
    reason: str


class Unsure(msgspec.Struct, frozen=True, gc=False):
    """A recorded request's outcome is unknown (the ledger did not settle it)."""

    reason: str


class Held(msgspec.Struct, frozen=True, gc=False):
    """Another run holds the key and its outcome stays unknown (intent now written)."""

    reason: str


Observation = Returned | Failed | CircuitOpen | NoBudget | Unsure | Held


# --- decisions: what happens next ------------------------------------------------------


class Attempt(msgspec.Struct, frozen=True, gc=False):
    """Run the tool (under the call's key). ``again``: a retry within the current series,
    whose ``max_elapsed`` counts from its first attempt; otherwise a series starts (the
    first attempt, a re-send after an uncertain outcome)."""

    again: bool = False


class Retry(msgspec.Struct, frozen=True, gc=False):
    """Record the failed attempt, wait out a jittered backoff (if a retry budget allows:
    else decide on ``NoBudget``), then ``then``."""

    then: Decision


class Verify(msgspec.Struct, frozen=True, gc=False):
    """Ask the tool's verifier: an effect it finds is the outcome; else ``otherwise``."""

    otherwise: Decision


class Ask(msgspec.Struct, frozen=True, gc=False):
    """Pause the run: a person says whether the effect happened."""

    reason: str


class Pause(msgspec.Struct, frozen=True, gc=False):
    """The question was asked and is not answered yet."""

    message: str


class Resend(msgspec.Struct, frozen=True, gc=False):
    """A person said it did not happen: a fresh intent, then a new series of attempts."""


class Fallback(msgspec.Struct, frozen=True, gc=False):
    """Take the tool's degraded path (not the effect)."""


class Done(msgspec.Struct, frozen=True, gc=False):
    """The call's outcome is ``value`` (from ``source``); ``with_intent``: write the
    intent with it even if one was written."""

    value: Any
    source: Source
    duration: float = 0.0
    with_intent: bool = False


class Fail(msgspec.Struct, frozen=True, gc=False):
    """The call fails for good; ``chained``: the last attempt's error is the cause."""

    kind: FailureKind
    message: str
    chained: bool = True


Decision = Attempt | Retry | Verify | Ask | Pause | Resend | Fallback | Done | Fail
ATTEMPT, AGAIN, RESEND, FALLBACK = Attempt(), Attempt(again=True), Resend(), Fallback()


def decide(tool: ToolDef, state: CallState, seen: Observation) -> Decision:
    """What happens next to ``state``, a call of ``tool``, after ``seen``. Pure."""
    match seen:
        case Returned():
            return Done(seen.value, Source.EXECUTED, seen.duration)
        case Failed():
            return _after_failure(tool, state, seen)
        case CircuitOpen():
            if tool.fallback is not None:
                return FALLBACK
            return Fail(TRANSIENT, f"circuit open for tool {tool.name}; failing fast", False)
        case NoBudget():
            message = f"{seen.message}; {seen.reason}"
            if seen.kind == INDETERMINATE:
                return _last_check(tool, seen.kind, message)
            return Fail(seen.kind, message, chained=False)
        case Unsure():
            return _unsure(tool, state, seen.reason)
        case Held():
            # The holder may still be executing: "not found yet" is no licence to send it
            # too. Only a re-send under the same key is safe (the service dedupes it).
            otherwise: Decision = ATTEMPT if tool.takes_key else Ask(seen.reason)
            return Verify(otherwise) if tool.verify is not None else otherwise


def _after_failure(tool: ToolDef, state: CallState, f: Failed) -> Decision:
    policy = tool.retry
    more = state.attempts < policy.max_attempts and (
        policy.max_elapsed is None or f.elapsed < policy.max_elapsed
    )
    if f.kind == INDETERMINATE and tool.side_effect:
        if tool.verify is None and not tool.takes_key:  # only a person can tell
            return Ask(f.message + ("" if more else " (attempts exhausted)"))
        if more:  # verify or re-send after a backoff, like any retry (budgets apply)
            return Retry(_uncertain(tool, f.message))
        return _last_check(tool, f.kind, f.message + " (attempts exhausted)")
    if f.kind == TRANSIENT and more:
        return Retry(AGAIN)
    return Fail(f.kind, f.message)


def _last_check(tool: ToolDef, kind: FailureKind, message: str) -> Decision:
    """Attempts (or a retry budget) exhausted for a tool whose uncertainty re-sends itself:
    verify once more, else fail for good (a resume re-attempts under the same key)."""
    fail = Fail(kind, message)
    return Verify(fail) if tool.verify is not None else fail


def _uncertain(tool: ToolDef, reason: str) -> Decision:
    """Verify, or re-send with the same key, or ask a person. Never a fresh key."""
    if tool.verify is not None:
        return Verify(ATTEMPT)
    return ATTEMPT if tool.takes_key else Ask(reason)


def _unsure(tool: ToolDef, state: CallState, reason: str) -> Decision:
    if not state.asked:
        return _uncertain(tool, reason)
    if not state.completed:
        return Pause(f"waiting for a person to say whether {tool.name} took effect")
    if state.confirmed:  # the person gave the effect's result (None for a bare "done")
        return Done(state.answer, Source.HUMAN)
    if str(state.answer).strip().lower() in AFFIRMATIVE:  # a log from before results
        return Done(state.answer, Source.HUMAN)
    # Not done: re-sent under a new intent, so a crash during it leaves the call uncertain
    # (and asks again) instead of replaying the answer into a blind second re-send.
    return RESEND


# --- how an outcome is written -------------------------------------------------------


class Settlement(StrEnum):
    COMMIT = "commit"  # write the outcome with the key's commit
    RELEASE = "release"  # write it and free the key (the effect did not happen)
    DEFER, DEFER_COMMIT = "defer", "defer_commit"  # ride with the next commit (and the key's)
    RECORD = "record"  # write it now, the ledger untouched


def settle(tool: ToolDef, state: CallState, source: str, *, defer: bool) -> Settlement:
    """How a success from ``source`` is written: a claimed key committed (a fallback frees
    it unless an attempt may have landed); ``self_resolving``: with the next commit."""
    resolves = defer and self_resolving(tool, state, source)
    if state.claim and source != Source.LEDGER:
        if source != Source.FALLBACK:
            return Settlement.DEFER_COMMIT if resolves else Settlement.COMMIT
        if not state.maybe_landed:
            return Settlement.RELEASE
    elif resolves:
        return Settlement.DEFER
    return Settlement.RECORD


def self_resolving(tool: ToolDef, state: CallState, source: str) -> bool:
    """Whether losing this success in a crash leaves an intent that its resume settles with
    no person (sent by a tool that verifies or takes the key, verified, the ledger's), and
    so does an undo (abandon, a rewind's compensate: it asks only a verifier)."""
    verifies, undo = tool.verify is not None, tool.verify is not None or not tool.compensate
    executed = source == Source.EXECUTED and (verifies or tool.takes_key)
    found = source == Source.LEDGER or (source == Source.VERIFIED and verifies)
    return state.intent is not None and tool.side_effect and undo and (executed or found)


def releases(state: CallState, kind: str) -> bool:
    """A final failure frees the call's key unless the effect may have happened."""
    return bool(state.claim) and not may_have_landed(state.maybe_landed, kind)
