"""The driver of one durable call: it carries out what ``callstate.decide`` says (attempt
under the tool's policies, wait out a retry, verify, ask a person, write the outcome) and
feeds back what came of it, until the call is done (its value returned) or fails or
pauses (raised). All I/O of a call's attempts is here; every choice is in ``decide``.

A failed attempt is recorded with its retry, or with the answer that follows it, or
inside the call's final failure.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ... import events as ev
from ... import failpoints
from ...errors import Paused
from ...kinds import Asked, FailureKind, Source
from ...policy.failure import error_for
from ..journal.callstate import (
    ATTEMPT,
    Ask,
    Attempt,
    CallState,
    CircuitOpen,
    Decision,
    Done,
    Fail,
    Failed,
    Fallback,
    NoBudget,
    Pause,
    Resend,
    Retry,
    Verify,
    decide,
    evolve,
)
from ..run.context import detached
from . import policies
from .evidence import failed_attempt
from .record import Call, fail, record, succeed


def drive(call: Call, state: CallState, decision: Decision) -> Any:
    """Carry out ``decision`` and those that follow; the call's value, or raises."""
    return _Driver(call, state).run(decision)


class _Driver:
    __slots__ = ("call", "cause", "pending", "since", "state")

    def __init__(self, call: Call, state: CallState) -> None:
        self.call, self.state = call, state
        self.since = 0.0  # when the current series of attempts began
        self.pending: ev.ToolFailed | None = None  # a failed attempt not recorded yet
        self.cause: BaseException | None = None  # the last attempt's error

    def run(self, d: Decision) -> Any:
        while True:
            match d:
                case Attempt():
                    d = self.attempt(d)
                case Retry():
                    d = self.retry(d)
                case Verify():
                    d = self.verify(d)
                case Resend():
                    self.state = record(self.call, self.state, with_intent=True)
                    failpoints.hit("after_intent")
                    d = ATTEMPT
                case Fallback():
                    tool, call = self.call.tool, self.call
                    assert tool.fallback is not None
                    d = Done(detached(tool.fallback, *call.args, **call.kwargs), Source.FALLBACK)
                case Done():
                    self.flush()
                    return succeed(
                        self.call,
                        self.state,
                        d.value,
                        d.source,
                        duration=d.duration,
                        with_intent=d.with_intent,
                    )
                case Ask():
                    self.ask(d.reason)
                case Pause():
                    raise Paused(d.message)
                case Fail():
                    return self.degrade(d)

    def attempt(self, d: Attempt) -> Decision:
        call, tool, clock = self.call, self.call.tool, self.call.ctx.guards.clock
        if not d.again:
            self.since = clock()
        out = policies.run_attempt(call, self.state)
        if isinstance(out, policies.Raised):
            state = self.state = self.state.attempted()
            failed = failed_attempt(call, state, out.error, out.kind, out.duration)
            self.state, self.pending, self.cause = evolve(state, failed), failed, out.error
            return decide(tool, self.state, Failed(out.kind, failed.message, clock() - self.since))
        if not isinstance(out, CircuitOpen):
            self.state = self.state.attempted()
            failpoints.hit("after_decision" if tool.decision else "after_tool")
        return decide(tool, self.state, out)

    def retry(self, d: Retry) -> Decision:
        failed = self.pending
        assert failed is not None
        refused = policies.budget(self.call)
        if refused is not None:
            return decide(
                self.call.tool, self.state, NoBudget(failed.kind, failed.message, refused)
            )
        self.state = policies.wait_retry(self.call, self.state, failed)
        self.pending = None
        return d.then

    def verify(self, d: Verify) -> Decision:
        verifier, key = self.call.tool.verify, self.state.sends_under
        assert verifier is not None and key is not None
        found = detached(verifier, key)
        return d.otherwise if found is None else Done(found, Source.VERIFIED)

    def flush(self) -> None:
        """Record the failed attempt on its own (an answer follows it)."""
        if self.pending is not None:
            self.state = record(self.call, self.state, self.pending)
            self.pending = None

    def ask(self, reason: str) -> NoReturn:
        """Pause the run: a person says whether the effect happened."""
        self.flush()
        tool, key = self.call.tool, self.state.key
        question = (
            f"Did {tool.name} (key {key}) take effect? {reason}. "
            "Answer 'not done', or 'done' with the result it had (--json-value), "
            "or abandon the run."
        )
        self.call.ctx.request_answer(self.call.number, question, reason=Asked.UNCERTAIN)

    def degrade(self, d: Fail) -> Any:
        """A decision's fallbacks, in order, for a transient failure that is final; the
        value the first to answer gave (recorded), else the failure."""
        if d.kind == FailureKind.TRANSIENT and self.call.fallback is not None:
            self.flush()
            answered, value = self.call.fallback()
            if answered:
                return value
        self.fail(d)

    def fail(self, d: Fail) -> NoReturn:
        fail(self.call, self.state, d.kind, d.message, self.pending)
        cause = self.cause if d.chained else None
        raise error_for(d.kind, f"{self.call.tool.name}: {d.message}") from cause
