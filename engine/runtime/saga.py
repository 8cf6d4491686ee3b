"""The saga: undoing a run's committed side effects, last first.

:func:`plan` is pure: from the run's typed effects (``engine.effects``) it says which
uncertain effects to settle first and which to undo. :class:`Saga` executes: it asks
verifiers, runs compensations and records each in the run. :func:`abandon` is the
lifecycle operation built on both; an effect nobody can undo safely stops it for a person.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from .. import events as ev
from .. import failpoints
from ..effects import Effect, Outcome, effects
from ..errors import UsageError
from ..history import RunWriter
from ..kinds import ENDED, FailureKind, RunStatus, Source
from ..policy import describe
from ..store import Append, Recorded
from . import ledger, registry
from .defs import ToolDef, normalize
from .repository import RunRepository
from .results import RunResult

UNDO_UNKNOWN = FailureKind.UNDO_UNKNOWN  # the kind of a failure that stops an abandon

Step = tuple[Effect, ToolDef]  # an effect, and the tool whose compensation undoes it


class CannotUndo(Exception):
    """An effect cannot be undone safely; ``unknowable`` when nobody can tell its state."""

    def __init__(self, effect: Effect, message: str, unknowable: bool = True) -> None:
        super().__init__(message)
        self.effect, self.message, self.unknowable = effect, message, unknowable


@dataclass(frozen=True)
class UndoPlan:
    """What abandoning a run undoes: ``settle``, effects of unknown outcome to ask their
    verifier about first; ``undo``, the run's own committed effects."""

    settle: list[Step] = field(default_factory=list)
    undo: list[Step] = field(default_factory=list)


def plan(
    found: Sequence[Effect], own_from: int, tool_of: Callable[[str], ToolDef | None]
) -> UndoPlan:
    """The undo plan of a run whose effects are ``found``: only effects with a compensation,
    and of the committed ones only the run's own from position ``own_from`` on (a fork's
    inherited effects, and those it reused, are its parent's to undo)."""
    settle, undo = [], []
    for effect in found:
        tool = tool_of(effect.tool)
        if tool is None or tool.compensate is None:
            continue
        if effect.outcome == Outcome.UNKNOWN:
            settle.append((effect, tool))
        elif effect.own and effect.position >= own_from:
            undo.append((effect, tool))
    return UndoPlan(settle, undo)


def last_first(steps: Iterable[Step]) -> list[Step]:
    """The steps still to undo, in reverse call order."""
    return sorted((s for s in steps if not s[0].undone), key=lambda s: s[0].call, reverse=True)


def flagged(recorded: Iterable[Recorded]) -> set[int | None]:
    """Effects a previous abandon stopped at as unknowable: abandoning again is a person's
    word that they were checked by hand."""
    return {
        r.event.call
        for r in recorded
        if isinstance(r.event, ev.AgentFailed) and r.event.kind == UNDO_UNKNOWN
    }


class Saga:
    """Executes undo steps for one run, recording each in it (through ``writer``)."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.run_id = writer.state.run_id

    def settle(self, effect: Effect, tool: ToolDef) -> Effect | None:
        """An effect whose outcome is unknown, asked of its verifier: the effect with the
        verified result (recorded in a run that has not ended), or None if it did not
        happen (its business key released)."""
        if tool.verify is None or effect.key is None:
            what = f"{effect.tool} (call {effect.call}, key {effect.key}) has an unknown outcome"
            raise CannotUndo(effect, what + " and no verifier")
        found = tool.verify(effect.key)
        if found is None:  # it never happened: nothing to undo, and its key is free
            release = self.release(effect, tool, "not done")
            if release:
                self.writer.store.append(release)
            return None
        found = tool.redacted(normalize(found, f"verified result of {effect.tool}"))
        # An ended run (a parent a rewind compensates) takes nothing but undo records.
        ended = self.writer.state.status in ENDED
        if effect.outcome == Outcome.UNKNOWN and not ended:
            self.writer.append(
                ev.ToolSucceeded(
                    at=ev.now(),
                    call=effect.call,
                    tool=effect.tool,
                    result=found,
                    source=Source.VERIFIED,
                )
            )
        replace = msgspec.structs.replace
        return replace(effect, outcome=Outcome.COMMITTED, result=found, source=Source.VERIFIED)

    def undo(self, effect: Effect, tool: ToolDef) -> None:
        """Run one compensation, recorded in the run (``compensation_started``, then
        ``compensated``); raises CannotUndo if it fails, or if an earlier undo of it was
        interrupted and cannot be repeated under the same undo key."""
        assert tool.compensate is not None
        call, name = effect.call, effect.tool
        takes_key = undo_takes_key(effect, tool)
        self.writer.append(
            ev.CompensationStarted(at=ev.now(), call=call, tool=name, key=effect.key)
        )
        kwargs = {"idempotency_key": f"undo:{effect.key}"} if takes_key else {}
        try:
            undone = tool.compensate(effect.result, **kwargs)
            result = tool.redacted(normalize(undone, f"compensation of {name}"))
        except Exception as e:
            message = describe(e)
            self.writer.append(ev.Compensated(at=ev.now(), call=call, tool=name, error=message))
            what = f"compensation of {name} (call {call}) failed: {message}"
            raise CannotUndo(effect, what, unknowable=False) from None
        failpoints.hit("in_compensation")
        extra = self.release(effect, tool, "compensated")
        self.writer.append(
            ev.Compensated(at=ev.now(), call=call, tool=name, result=result), extra=extra
        )

    def release(self, effect: Effect, tool: ToolDef, reason: str) -> list[Append]:
        """Free the effect's business key, if this run holds it."""
        if not effect.key or tool.key is None:
            return []
        key_state = ledger.read(self.writer.store, effect.key)
        if not key_state.owned_by(self.run_id, effect.call):
            return []
        return [
            ledger.release_event(effect.key, key_state.version, self.run_id, effect.call, reason)
        ]

    def stuck(self, call: int, message: str, kind: str = FailureKind.PERMANENT) -> RunResult:
        """Undoing cannot finish safely: the run fails, naming the effect; abandon retries."""
        self.writer.append(ev.AgentFailed(at=ev.now(), call=call, kind=kind, error=message))
        return RunResult(self.run_id, RunStatus.FAILED, error=message)

    def unknowable(self, stop: CannotUndo, flagged: set[int | None]) -> RunResult | None:
        """An effect nobody can undo safely: the first abandon stops naming it; once a
        person has seen that (``flagged``), it is left as it is, recorded, and undoing
        goes on (None)."""
        call = stop.effect.call
        if call not in flagged:
            message = f"{stop.message}: check it by hand, then abandon again to leave it as it is"
            return self.stuck(call, message, kind=UNDO_UNKNOWN)
        message = "not undone: its outcome is unknown; left as it is on a person's word"
        self.writer.append(
            ev.Compensated(at=ev.now(), call=call, tool=stop.effect.tool, error=message)
        )
        return None

    def execute(self, todo: UndoPlan, flagged: set[int | None]) -> RunResult | None:
        """Settle, then undo last first; the failed result that stops it, else None."""
        undo = list(todo.undo)
        for effect, tool in todo.settle:
            try:
                settled = self.settle(effect, tool)
            except CannotUndo as stop:
                if (result := self.unknowable(stop, flagged)) is not None:
                    return result
                continue
            undo += [(settled, tool)] if settled is not None else []
        for effect, tool in last_first(undo):
            try:
                self.undo(effect, tool)
            except CannotUndo as stop:
                if not stop.unknowable:
                    return self.stuck(effect.call, stop.message)
                if (result := self.unknowable(stop, flagged)) is not None:
                    return result
        return None


def undo_takes_key(effect: Effect, tool: ToolDef) -> bool:
    """Whether the compensation takes an undo key; raises CannotUndo when an earlier undo
    of ``effect`` was interrupted and, without a key, cannot be repeated safely."""
    assert tool.compensate is not None
    takes_key = "idempotency_key" in inspect.signature(tool.compensate).parameters
    if effect.undo_open and not takes_key:
        what = f"compensation of {effect.tool} (call {effect.call}) was interrupted"
        raise CannotUndo(effect, what + " and its outcome is unknown")
    return takes_key


def abandon(runs: RunRepository, run_id: str) -> RunResult:
    """Stop the run for good, undoing its committed side effects in reverse order. An
    effect that cannot be undone safely fails the run, naming it; abandon again retries."""
    rid = runs.resolve(run_id)
    with runs.held(rid):
        run = runs.load(rid, "be abandoned")
        if run.state.status == RunStatus.COMPLETED:
            raise UsageError(f"run {rid} has completed; there is nothing to abandon")
        if run.state.status == RunStatus.ABANDONED:
            return RunResult(rid, RunStatus.ABANDONED, error=run.state.error)
        agent = run.agent

        def tool_of(name: str) -> ToolDef | None:
            return registry.tool_for(agent, name)

        todo = plan(effects(run.recorded), 2 + run.started.inherited, tool_of)
        stopped = Saga(run.writer).execute(todo, flagged(run.recorded))
        if stopped is not None:
            return stopped
        run.writer.append(ev.AgentAbandoned(at=ev.now(), reason="abandoned by request"))
        return RunResult(rid, RunStatus.ABANDONED)
