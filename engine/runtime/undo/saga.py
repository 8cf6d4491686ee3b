"""The saga: undoing a run's committed side effects, last first.

:func:`plan` is pure: from the run's typed effects (``engine.log.effects``) it says which
uncertain effects to settle first and which to undo. :class:`Saga` executes: it asks
verifiers, runs compensations and records each in the run. :func:`abandon` is the
lifecycle operation built on both; an effect nobody can undo safely stops it for a person.
A run's tree is abandoned children first (each with its own subtree, latest started
first), so every run's descendants are undone before it; a child still executing is
stopped first (:class:`Stopping`), which is also how a supervisor replaces its children.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import msgspec

from ... import events as ev
from ... import failpoints
from ...errors import CorruptData, RunBusy, UsageError
from ...kinds import FINAL, FailureKind, RunStatus, Source
from ...log.effects import Effect, Outcome, effects
from ...log.history import RunWriter, rebuild
from ...log.state import ChildOf
from ...log.subtree import spawned_after, tree_effects
from ...policy.failure import describe
from ...polling import poll_until
from ...store import Append, Recorded
from ..call import ledger
from ..defs import registry
from ..defs.definitions import ToolDef, normalize
from ..run.repository import LoadedRun, RunRepository
from ..run.results import RunResult

UNDO_UNKNOWN = FailureKind.UNDO_UNKNOWN  # the kind of a failure that stops an abandon

STOP_PATIENCE = 30.0  # seconds an abandon waits for a child this process executes to stop
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
        self.now = writer.wall  # the engine's wall clock: dates every undo record

    def settle(self, effect: Effect, tool: ToolDef) -> Effect | None:
        """An effect whose outcome is unknown, asked of its verifier: the effect with the
        verified result (recorded in a run that has not ended), or None if it did not
        happen (its business key released)."""
        key = effect.sends_under
        if tool.verify is None or key is None:
            what = f"{effect.tool} (call {effect.call}, key {effect.key}) has an unknown outcome"
            raise CannotUndo(effect, what + " and no verifier")
        found = tool.verify(key)
        if found is None:  # it never happened: nothing to undo, and its key is free
            release = self.release(effect, tool, "not done")
            if release:
                self.writer.store.append(release, fence=self.writer.fence)
            return None
        found = tool.redacted(normalize(found, f"verified result of {effect.tool}"))
        # An ended run (a parent a rewind compensates) takes nothing but undo records.
        ended = self.writer.state.status in FINAL
        if effect.outcome == Outcome.UNKNOWN and not ended:
            self.writer.append(
                ev.ToolSucceeded(
                    at=self.now(),
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
            ev.CompensationStarted(at=self.now(), call=call, tool=name, key=effect.key)
        )
        kwargs = {"idempotency_key": f"undo:{effect.sends_under}"} if takes_key else {}
        try:
            undone = tool.compensate(effect.result, **kwargs)
            result = tool.redacted(normalize(undone, f"compensation of {name}"))
        except Exception as e:
            message = describe(e)
            self.writer.append(ev.Compensated(at=self.now(), call=call, tool=name, error=message))
            what = f"compensation of {name} (call {call}) failed: {message}"
            raise CannotUndo(effect, what, unknowable=False) from None
        failpoints.hit("in_compensation")
        extra = self.release(effect, tool, ledger.COMPENSATED)
        self.writer.append(
            ev.Compensated(at=self.now(), call=call, tool=name, result=result), extra=extra
        )

    def release(self, effect: Effect, tool: ToolDef, reason: str) -> list[Append]:
        """Free the effect's business key, if this run holds it."""
        if not effect.key or tool.key is None:
            return []
        key_state = ledger.read(self.writer.store, effect.key)
        if not key_state.owned_by(self.run_id, effect.call):
            return []
        return [
            ledger.release_event(
                effect.key, key_state.version, self.run_id, effect.call, reason, at=self.now()
            )
        ]

    def stuck(
        self, call: int, message: str, kind: FailureKind = FailureKind.PERMANENT
    ) -> RunResult:
        """Undoing cannot finish safely: the run fails, naming the effect; abandon retries.
        A run that ended (a completed child a supervisor replaces) keeps its end: nothing
        but undo records may follow it."""
        if self.writer.state.status not in FINAL:
            self.writer.append(ev.AgentFailed(at=self.now(), call=call, kind=kind, error=message))
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
            ev.Compensated(at=self.now(), call=call, tool=stop.effect.tool, error=message)
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


def abandon(runs: RunRepository, run_id: str, stopping: Stopping | None = None) -> RunResult:
    """Stop the run for good: first its unfinished children, each with its own subtree
    (latest spawned first, so the deepest undo first), then its own committed side
    effects in reverse order. An effect that cannot be undone safely, in it or in a
    child, fails the run naming it; abandon again retries. A child executing in this
    process is told to stop (and waited for, ``stopping.seconds`` at most); one a live
    owner elsewhere executes is RunBusy, naming it."""
    rid = runs.resolve(run_id)
    with runs.held(rid):
        result = abandon_held(runs, rid, stopping or Stopping())
    return reported(runs, result)


def reported(runs: RunRepository, result: RunResult) -> RunResult:
    """The abandon's result with the effects of the run's subtree that were undone
    (``compensated``) and those that still stand in the world (``standing``: committed
    and not undone, with no compensation or left as they are), deepest first."""
    inherited = runs.load(result.run_id, "be abandoned").started.inherited
    found = tree_effects(runs.store, result.run_id, after=1 + inherited)
    undone = tuple(fx for fx in found if fx.undone)
    stands = tuple(fx for fx in found if fx.own and not fx.undone)
    return msgspec.structs.replace(result, compensated=undone, standing=stands)


def abandon_held(
    runs: RunRepository,
    rid: str,
    stopping: Stopping,
    completed_too: bool = False,
    above: frozenset[str] = frozenset(),
) -> RunResult:
    """Abandon the run ``rid``, whose lease the caller holds, and its subtree. With
    ``completed_too`` a completed run's effects are undone as well (it stays completed:
    a supervisor restarting a child whose result its parent has not taken)."""
    run = runs.load(rid, "be abandoned")
    status, parent = run.state.status, run.state.parent_run_id
    if status == RunStatus.COMPLETED and not completed_too:
        raise UsageError(f"run {rid} has completed; there is nothing to abandon")
    if status == RunStatus.ABANDONED:
        return RunResult(rid, RunStatus.ABANDONED, error=run.state.error, parent_run_id=parent)
    if status == RunStatus.DRY_RUN:  # it sent nothing, and nothing more runs in it
        if not completed_too:
            raise UsageError(f"run {rid} is a dry run that ended; there is nothing to abandon")
        return RunResult(rid, status, run.state.output, parent_run_id=parent)
    stopped = _abandon_children(runs, run, stopping, above | {rid})
    if stopped is not None:
        return stopped
    agent = run.agent

    def tool_of(name: str) -> ToolDef | None:
        return registry.tool_for(agent, name)

    todo = plan(effects(run.recorded), 2 + run.started.inherited, tool_of)
    stopped = Saga(run.writer).execute(todo, flagged(run.recorded))
    if stopped is not None:
        return msgspec.structs.replace(stopped, parent_run_id=parent)
    # Its locks are free from here (a child's, or a run a supervisor replaces, never goes
    # through Engine._after, which frees those of the run abandoned by request).
    if status == RunStatus.COMPLETED:
        runs.store.locks.release_all(rid)
        return RunResult(rid, RunStatus.COMPLETED, run.state.output, parent_run_id=parent)
    run.writer.append(ev.AgentAbandoned(at=run.writer.wall(), reason="abandoned by request"))
    runs.store.locks.release_all(rid)
    return RunResult(rid, RunStatus.ABANDONED, parent_run_id=parent)


def _abandon_children(
    runs: RunRepository, run: LoadedRun, stopping: Stopping, above: frozenset[str]
) -> RunResult | None:
    """Abandon the run's unfinished children, latest started first, each with its own
    subtree; the first that cannot be undone stops it, and the run fails naming it."""
    for child in reversed(spawned_after(run.recorded)):
        state = rebuild(runs.store, child)
        # A fork's inherited spawns name its parent's children: they are not the fork's
        # to abandon (the parent may still wait on them).
        if state.status in FINAL or state.lineage != ChildOf(run.run_id):
            continue
        if child in above:  # forged rows: a run its own ancestor
            raise CorruptData(f"run {run.run_id}: its run tree loops (through {child})")
        with stopped(runs, child, stopping):
            result = abandon_held(runs, child, stopping, above=above)
        if result.status == RunStatus.FAILED:
            message = f"abandoning its child {child} stopped: {result.error}"
            run.writer.append(ev.AgentFailed(at=run.writer.wall(), error=message))
            parent = run.state.parent_run_id
            return RunResult(run.run_id, RunStatus.FAILED, error=message, parent_run_id=parent)
    return None


def _go_on() -> None:
    return None


@dataclass(frozen=True)
class Stopping:
    """How to take a child run out of the hands of whoever executes it: a thread of this
    engine is told to stop (``why``) at its next durable call and waited for, ``seconds``
    at most; a live owner elsewhere is waited for too if ``elsewhere``, else RunBusy.
    ``check`` runs between tries (a caller that must stop raises there)."""

    seconds: float = STOP_PATIENCE
    elsewhere: bool = False
    why: str = "the abandon of its parent"
    check: Callable[[], None] = _go_on


@contextlib.contextmanager
def stopped(runs: RunRepository, rid: str, stopping: Stopping) -> Iterator[None]:
    """Hold the lease of the child run ``rid`` for the block, once it is stopped (see
    :class:`Stopping`); RunBusy naming it when it cannot be."""
    refused: list[RunBusy] = []

    def take() -> contextlib.ExitStack | None:
        if refused:
            stopping.check()
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(runs.held(rid))
        except RunBusy as busy:
            refused.append(busy)
            if not (runs.leases.stop(rid, stopping.why) or stopping.elsewhere):
                raise RunBusy(f"child run {rid} cannot be stopped: {busy}") from None
            return None
        return stack

    held = poll_until(take, stopping.seconds, first=0.01, most=0.2)
    if held is None:
        raise RunBusy(f"child run {rid} cannot be stopped: {refused[-1]}") from None
    with held:
        yield
