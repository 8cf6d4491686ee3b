"""One reader for a run's side effects: which calls sent something, what came of each,
and whether it was undone. Abandon, rewind and the CLI all answer "which effects came
after position N", "which of a parent's effects still stand" and "which calls are
uncertain" with it."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

import msgspec

from .. import events as ev
from ..kinds import FailureKind, Source

# Outcome sources that are not the run's own effect: taken from the shared ledger (another
# run sent it), from a fork's parent, or a degraded path that sent nothing of the tool.
NOT_OWN = frozenset({Source.LEDGER, Source.PARENT, Source.FALLBACK})
SEND = "run.send"  # the ``tool`` of a durable message's effect (its ``key``: the message id)


class Outcome(StrEnum):
    """What a side-effecting call's log says came of it (``Effect.outcome``)."""

    COMMITTED = "committed"  # a recorded result
    UNKNOWN = "unknown"  # an intent with no outcome
    FAILED = "failed"  # a final failure


def may_have_landed(before: bool, kind: str) -> bool:
    """Whether a call's effect may exist after an attempt that failed as ``kind``
    (``before``: an earlier attempt's already may): an indeterminate attempt's may."""
    return before or kind == FailureKind.INDETERMINATE


def doubt_after(before: bool, failed: ev.ToolFailed) -> bool:
    """Whether a call's effect may exist with nobody knowing after the attempt ``failed``
    (``before``: what the earlier ones left): an indeterminate attempt leaves it in doubt;
    one whose result could not be recorded (``landed``) settles it - the effect happened,
    its key stays held - whatever came before. Every fold of a call's attempts steps by it
    (the effects reader, the runtime's call state, the tools view)."""
    return False if failed.landed else may_have_landed(before, failed.kind)


def is_uncertain(*, answered: bool, failed: bool, maybe_landed: bool) -> bool:
    """The one rule of an uncertain call, for every reader (effects, the runtime's call
    state, the views): its intent went out and the log does not say how it ended - no
    outcome, or a final failure while an attempt may have landed."""
    return not answered or (failed and maybe_landed)


def answered(event: ev.Event) -> int | None:
    """The call whose latest intent ``event`` answers (a success, or a failure with no
    attempt left); None for any other event. An intent no event answers is open."""
    if isinstance(event, ev.ToolSucceeded) or (isinstance(event, ev.ToolFailed) and event.final):
        return event.call
    return None


class Effect(msgspec.Struct, frozen=True):
    """One side-effecting call as a run's log tells it (the latest intent of its call).

    ``outcome`` is ``committed`` (a recorded result), ``unknown`` (an intent with no
    outcome) or ``failed`` (a final failure; ``maybe_landed`` if an attempt's outcome
    was unknown, so the effect may exist all the same)."""

    call: int
    tool: str
    key: str | None = None
    result: Any = None
    outcome: Outcome = Outcome.UNKNOWN
    source: str = ""  # a Source once the outcome is committed, "" before
    args_hash: str = ""
    position: int = 0  # of the latest intent
    maybe_landed: bool = False
    undone: bool = False  # a compensation succeeded
    undo_open: bool = False  # a compensation started and has no outcome (interrupted)
    parent_call: int | None = None  # a fork's call that took over this parent call
    sent_key: str | None = None  # the versioned key it went out under, if not ``key``
    run_id: str = ""  # its run, when read across a run tree (``engine.log.subtree``)

    @property
    def sends_under(self) -> str | None:
        """The idempotency key its tool, verifier and compensation receive."""
        return self.sent_key or self.key

    @property
    def own(self) -> bool:
        """Committed by this run itself: its own to undo."""
        return self.outcome == Outcome.COMMITTED and self.source not in NOT_OWN

    @property
    def uncertain(self) -> bool:
        """It may have happened, and nobody recorded whether it did."""
        failed = self.outcome == Outcome.FAILED
        done = self.outcome != Outcome.UNKNOWN
        return is_uncertain(answered=done, failed=failed, maybe_landed=self.maybe_landed)


def effects(recorded: Iterable[ev.Positioned], after: int = 0) -> list[Effect]:
    """The side-effecting calls whose latest intent comes after position ``after``, in
    call order."""
    found: dict[int, Effect] = {}
    replace = msgspec.structs.replace
    for r in recorded:
        e = r.event
        if isinstance(e, ev.ToolInvoked):
            if e.side_effect:
                before = found.get(e.call)
                found[e.call] = Effect(
                    e.call,
                    e.tool,
                    e.key,
                    args_hash=e.args_hash,
                    position=r.position,
                    maybe_landed=before is not None and before.maybe_landed,
                    parent_call=e.parent_call,
                    sent_key=e.sent_key,
                )
            continue
        call = getattr(e, "call", None)
        if not isinstance(call, int) or call not in found:
            continue
        fx = found[call]
        if isinstance(e, ev.ToolSucceeded):
            found[call] = replace(fx, outcome=Outcome.COMMITTED, result=e.result, source=e.source)
        elif isinstance(e, ev.ToolFailed):
            landed = doubt_after(fx.maybe_landed, e)
            ends = answered(e) is not None and fx.outcome == Outcome.UNKNOWN
            outcome = Outcome.FAILED if ends else fx.outcome
            found[call] = replace(fx, maybe_landed=landed, outcome=outcome)
        elif isinstance(e, ev.CompensationStarted):
            found[call] = replace(fx, undo_open=True)
        elif isinstance(e, ev.Compensated):
            found[call] = replace(fx, undo_open=False, undone=fx.undone or e.error is None)
    return sorted((fx for fx in found.values() if fx.position > after), key=lambda fx: fx.call)


def sends(recorded: Iterable[ev.Positioned], after: int = 0) -> list[Effect]:
    """The durable messages the run sent (``run.send``) after position ``after``,
    as effects (tool :data:`SEND`, key the message id, result its recipient and topic),
    in call order; a fork's send that
    took over its parent's is the parent's message (its id)."""
    return [
        Effect(
            e.call,
            SEND,
            e.message_id,
            {"to": e.to_run_id, "topic": e.topic},
            Outcome.COMMITTED,
            args_hash=e.args_hash,
            parent_call=e.parent_call,
            position=r.position,
        )
        for r in recorded
        if isinstance(e := r.event, ev.MessageSent) and r.position > after
    ]


def uncertain(recorded: Iterable[ev.Positioned]) -> list[Effect]:
    """The side-effecting calls that may have happened with nobody recording whether: an
    intent with no outcome, or a final failure after an attempt whose outcome was unknown
    (``indeterminate``: the effect may have landed). In call order."""
    return [fx for fx in effects(recorded) if fx.uncertain]


def after_fork(
    parent: Iterable[Effect], fork: Iterable[Effect], parent_id: str
) -> tuple[list[Effect], list[Effect]]:
    """Of the effects of a parent's subtree after a fork's position (``parent``), those
    committed and not undone, split in two, each in ``parent``'s order: those that still
    stand in the world, and those the effects of the fork's subtree (``fork``) took over
    instead of sending again (by reuse of one of the parent's own calls, or through the
    ledger's key)."""
    mine = list(fork)
    taken = {fx.parent_call for fx in mine if fx.parent_call is not None}  # the fork's own
    keys = {fx.key for fx in mine if fx.outcome == Outcome.COMMITTED and fx.source == Source.LEDGER}
    stands: list[Effect] = []
    reused: list[Effect] = []
    for fx in parent:
        if fx.outcome != Outcome.COMMITTED or fx.source == Source.FALLBACK or fx.undone:
            continue
        own = fx.run_id == parent_id and fx.call in taken
        took = own or (fx.key is not None and fx.key in keys)
        (reused if took else stands).append(fx)
    return stands, reused
