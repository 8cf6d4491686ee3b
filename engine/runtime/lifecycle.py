"""Acts on a run's life beyond running it: answer a question, abandon (saga undo), and
rewind (fork a new run from a position of an old one, lineage recorded)."""

from __future__ import annotations

import contextlib
import inspect
import uuid
from typing import TYPE_CHECKING, TypeVar

import msgspec

from .. import effects as fx
from .. import events as ev
from .. import failpoints
from ..errors import UsageError
from ..history import RunWriter, read_events, read_run, resolve_position, run_stream, standing
from ..policy import describe
from ..state import RunState, fold
from ..store import Append, Recorded
from . import adoption, calls, forks, ledger, registry
from .context import LogEnd
from .defs import AgentDef, ToolDef, normalize
from .journal import Journal
from .results import RunResult

if TYPE_CHECKING:
    from .engine import Engine

# Events that belong to the parent's life, not to the calls a fork inherits.
_LIFECYCLE = (ev.AgentStarted, ev.AgentResumed, ev.AgentFinished, ev.AgentFailed, ev.AgentAbandoned)


def _load(engine: Engine, run_id: str) -> tuple[str, list[Recorded], RunState]:
    """The run's checked history (so its first event is agent_started): a damaged log
    raises CorruptData before anything acts on it."""
    history = read_run(engine.store, engine.resolve(run_id))
    return history.run_id, history.recorded, history.state


def answer(engine: Engine, run_id: str, value: object) -> RunResult:
    """Record the answer to the question a paused run waits on, then continue it."""
    rid = engine.resolve(run_id)
    with engine.leases.hold(engine.store, rid):
        return _answer(engine, rid, value)


def _answer(engine: Engine, run_id: str, value: object) -> RunResult:
    rid, recorded, state = _load(engine, run_id)
    adoption.refuse_imported(state, "be answered")
    if state.status != "paused" or state.waiting is None:
        raise UsageError(f"run {rid} is not waiting for an answer (it is {state.status})")
    asked = [r.event for r in recorded if isinstance(r.event, ev.HumanInputRequested)]
    call = asked[-1].call
    value = normalize(value, "the answer")
    if asked[-1].reason == "uncertain":
        calls.check_uncertain_answer(value)  # nothing is recorded for an unclear answer
    agent = registry.load_agent(*adoption.runs_as(state, recorded, "be answered"))
    _replays(engine, agent, rid, [r.event for r in recorded])  # changed code: record nothing
    writer = RunWriter(engine.store, state)
    writer.append(ev.HumanInputProvided(at=ev.now(), call=call, value=value))
    return engine.resume(rid)


def abandon(engine: Engine, run_id: str) -> RunResult:
    """Stop the run for good, undoing its committed side effects in reverse order."""
    rid = engine.resolve(run_id)
    with engine.leases.hold(engine.store, rid):
        return _abandon(engine, rid)


def _abandon(engine: Engine, run_id: str) -> RunResult:
    rid, recorded, state = _load(engine, run_id)
    name, path = adoption.runs_as(state, recorded, "be abandoned")
    if state.status == "completed":
        raise UsageError(f"run {rid} has completed; there is nothing to abandon")
    if state.status == "abandoned":
        return RunResult(rid, "abandoned", error=state.error)
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    agent = registry.load_agent(name, path)
    writer = RunWriter(engine.store, state, snapshot_every=agent.snapshot_every)
    # Effects a previous abandon flagged as unknowable: abandoning again is a person's
    # word that they were checked by hand, so they are skipped (recorded as such).
    flagged = {e.call for e in _events(recorded, ev.AgentFailed) if e.kind == UNDO_UNKNOWN}
    found = fx.effects(recorded)
    # A fork's inherited effects are its parent's to undo, and so are those it reused.
    own_from = 2 + started.inherited
    todo = [e for e in found if e.own and e.position >= own_from]
    for effect in found:
        tool = registry.tool_for(agent, effect.tool)
        if effect.outcome != "unknown" or tool is None or tool.compensate is None:
            continue
        try:
            settled = _settle_unknown(engine, writer, effect, tool)
        except _CannotUndo as stop:
            if (result := _unknowable(writer, stop, flagged)) is not None:
                return result
            continue
        todo += [settled] if settled is not None else []
    for effect in sorted(todo, key=lambda e: e.call, reverse=True):
        tool = registry.tool_for(agent, effect.tool)
        if effect.undone or tool is None or tool.compensate is None:
            continue
        try:
            _undo(engine, writer, effect, tool)
        except _CannotUndo as stop:
            if not stop.unknowable:
                return _stuck(writer, effect.call, stop.message)
            if (result := _unknowable(writer, stop, flagged)) is not None:
                return result
    writer.append(ev.AgentAbandoned(at=ev.now(), reason="abandoned by request"))
    return RunResult(rid, "abandoned")


UNDO_UNKNOWN = "undo_unknown"  # the kind of a failure that stops an abandon for a person


class _CannotUndo(Exception):
    """An effect cannot be undone safely; ``unknowable`` when nobody can tell its state."""

    def __init__(self, effect: fx.Effect, message: str, unknowable: bool = True) -> None:
        super().__init__(message)
        self.effect, self.message, self.unknowable = effect, message, unknowable


def _settle_unknown(
    engine: Engine, writer: RunWriter, effect: fx.Effect, tool: ToolDef
) -> fx.Effect | None:
    """An effect whose outcome is unknown, asked of its verifier: the effect with the
    verified result (recorded in a run that has not ended), or None if it did not happen
    (its business key released)."""
    if tool.verify is None or effect.key is None:
        what = f"{effect.tool} (call {effect.call}, key {effect.key}) has an unknown outcome"
        raise _CannotUndo(effect, what + " and no verifier")
    found = tool.verify(effect.key)
    if found is None:  # it never happened: nothing to undo, and its key is free
        release = _release(engine, writer.state.run_id, effect, tool, "not done")
        if release:
            engine.store.append(release)
        return None
    found = tool.redacted(normalize(found, f"verified result of {effect.tool}"))
    # An ended run (a parent a rewind compensates) takes nothing but undo records.
    if effect.outcome == "unknown" and writer.state.status not in ("completed", "abandoned"):
        writer.append(
            ev.ToolSucceeded(
                at=ev.now(), call=effect.call, tool=effect.tool, result=found, source="verified"
            )
        )
    return msgspec.structs.replace(effect, outcome="committed", result=found, source="verified")


def _undo(engine: Engine, writer: RunWriter, effect: fx.Effect, tool: ToolDef) -> None:
    """Run one compensation, recorded in the run (``compensation_started``, then
    ``compensated``); raises _CannotUndo if it fails, or if an earlier undo of it was
    interrupted and cannot be repeated under the same undo key."""
    assert tool.compensate is not None
    call, name = effect.call, effect.tool
    takes_key = _undo_takes_key(effect, tool)
    writer.append(ev.CompensationStarted(at=ev.now(), call=call, tool=name, key=effect.key))
    kwargs = {"idempotency_key": f"undo:{effect.key}"} if takes_key else {}
    try:
        undo = tool.redacted(
            normalize(tool.compensate(effect.result, **kwargs), f"compensation of {name}")
        )
    except Exception as e:
        message = describe(e)
        writer.append(ev.Compensated(at=ev.now(), call=call, tool=name, error=message))
        what = f"compensation of {name} (call {call}) failed: {message}"
        raise _CannotUndo(effect, what, unknowable=False) from None
    failpoints.hit("in_compensation")
    extra = _release(engine, writer.state.run_id, effect, tool, "compensated")
    writer.append(ev.Compensated(at=ev.now(), call=call, tool=name, result=undo), extra=extra)


def _undo_takes_key(effect: fx.Effect, tool: ToolDef) -> bool:
    """Whether the compensation takes an undo key; raises _CannotUndo when an earlier undo
    of ``effect`` was interrupted and, without a key, cannot be repeated safely."""
    assert tool.compensate is not None
    takes_key = "idempotency_key" in inspect.signature(tool.compensate).parameters
    if effect.undo_open and not takes_key:
        what = f"compensation of {effect.tool} (call {effect.call}) was interrupted"
        raise _CannotUndo(effect, what + " and its outcome is unknown")
    return takes_key


def _release(
    engine: Engine, run_id: str, effect: fx.Effect, tool: ToolDef, reason: str
) -> list[Append]:
    """Free the effect's business key, if this run holds it."""
    if not effect.key or tool.key is None:
        return []
    key_state = ledger.read(engine.store, effect.key)
    if not key_state.owned_by(run_id, effect.call):
        return []
    return [ledger.release_event(effect.key, key_state.version, run_id, effect.call, reason)]


def _stuck(writer: RunWriter, call: int, message: str, kind: str = "permanent") -> RunResult:
    """Abandoning cannot finish safely: the run fails, naming the effect; abandon retries."""
    writer.append(ev.AgentFailed(at=ev.now(), call=call, kind=kind, error=message))
    return RunResult(writer.state.run_id, "failed", error=message)


def _unknowable(writer: RunWriter, stop: _CannotUndo, flagged: set[int | None]) -> RunResult | None:
    """An effect abandon cannot undo safely: the first abandon stops naming it; once a
    person has seen that (``flagged``), it is left as it is, recorded, and abandon goes on."""
    call = stop.effect.call
    if call not in flagged:
        message = f"{stop.message}: check it by hand, then abandon again to leave it as it is"
        return _stuck(writer, call, message, kind=UNDO_UNKNOWN)
    message = "not undone: its outcome is unknown; left as it is on a person's word"
    writer.append(ev.Compensated(at=ev.now(), call=call, tool=stop.effect.tool, error=message))
    return None


_E = TypeVar("_E", bound=ev.Event)


def _events(recorded: list[Recorded], kind: type[_E]) -> list[_E]:
    return [r.event for r in recorded if isinstance(r.event, kind)]


def rewind(engine: Engine, run_id: str, to: int | str, effects: str = forks.REUSE) -> RunResult:
    """Fork a new run holding the parent's calls up to ``to``, then continue the fork.

    The parent's side effects after ``to``: ``reuse`` takes each over when the fork makes
    the same call, ``compensate`` undoes them first (recorded in the parent), ``resend``
    sends them again under the fork's keys. The result names those that still stand."""
    if effects not in forks.MODES:
        raise UsageError(f"effects must be one of {', '.join(forks.MODES)}, not {effects!r}")
    rid, recorded, state = _load(engine, run_id)
    name, path = adoption.runs_as(state, recorded, "be rewound")
    target = resolve_position(state, to, recorded)
    assert target is not None
    target = _outside_calls(recorded, target)
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    agent = registry.load_agent(name, path)
    fork_id = uuid.uuid4().hex
    inherited = [r.event for r in recorded[1:target] if not isinstance(r.event, _LIFECYCLE)]
    head = ev.AgentStarted(
        at=ev.now(),
        agent=name,
        import_path=path,
        input=started.input,
        parent_run_id=rid,
        fork_position=target,
        code_version=started.code_version,
        inherited=len(inherited),
        effects=effects,
        key_check=started.key_check,  # the inherited calls were hashed under its key
    )
    _replays(engine, agent, rid, [head, *inherited])
    if effects == forks.COMPENSATE:
        _compensate_after(engine, rid, target, agent)
    with engine.leases.hold(engine.store, fork_id):
        writer = RunWriter(
            engine.store, RunState(run_id=fork_id), snapshot_every=agent.snapshot_every
        )
        writer.append(head, *inherited)
        journal = Journal.from_events(read_events(engine.store, fork_id))
        result = engine._drive(agent, writer, journal, head.input, check=head.key_check)
    return msgspec.structs.replace(result, standing=tuple(standing(engine.store, fork_id)))


def _compensate_after(engine: Engine, run_id: str, target: int, agent: AgentDef) -> None:
    """Undo the parent's own effects after ``target`` in reverse order, each recorded in
    the parent. One that cannot be undone safely raises UsageError naming it (before any
    undo when that is known up front); the parent's log shows what was undone."""
    with engine.leases.hold(engine.store, run_id):
        rid, recorded, state = _load(engine, run_id)
        writer = RunWriter(engine.store, state, snapshot_every=agent.snapshot_every)
        try:
            todo = _undoable(engine, agent, writer, fx.effects(recorded, after=target)[::-1])
            for effect, tool in todo:
                _undo(engine, writer, effect, tool)
        except _CannotUndo as stop:
            raise UsageError(
                f"rewind stopped, nothing forked: {stop.message} (run {rid}); "
                "rewind with effects 'reuse' or 'resend' (CLI --effects), or undo it by hand"
            ) from None


def _undoable(
    engine: Engine, agent: AgentDef, writer: RunWriter, after: list[fx.Effect]
) -> list[tuple[fx.Effect, ToolDef]]:
    """Of the parent's effects ``after`` the target (last first), those to undo, with
    their tools; raises _CannotUndo for the first that cannot be undone safely (no
    compensation, unknown outcome without a verifier, an interrupted undo without a key)."""
    todo: list[tuple[fx.Effect, ToolDef]] = []
    for effect in after:
        if effect.undone or not (effect.own or effect.uncertain):
            continue  # undone already, or not the parent's own (ledger, its own parent)
        tool = registry.tool_for(agent, effect.tool)
        if tool is None or tool.compensate is None:
            raise _CannotUndo(effect, f"{effect.tool} (call {effect.call}) has no compensation")
        settled = _settle_unknown(engine, writer, effect, tool) if effect.uncertain else effect
        if settled is None:
            continue
        _undo_takes_key(settled, tool)  # known up front: stop before undoing anything
        todo.append((settled, tool))
    return todo


def _replays(engine: Engine, agent: AgentDef, run_id: str, events: list[ev.Event]) -> None:
    """Replay ``events`` (a fork's inherited prefix, a paused run's log) against the current
    code before writing anything: code that no longer matches raises NonDeterminismError
    and leaves no orphan fork, no recorded answer."""
    head = events[0]
    assert isinstance(head, ev.AgentStarted)
    recorded = [Recorded(run_stream(run_id), i + 1, e) for i, e in enumerate(events)]
    state = fold([(r.position, r.event) for r in recorded], RunState(run_id=run_id))
    writer, journal = RunWriter(engine.store, state), Journal.from_events(recorded)
    with contextlib.suppress(LogEnd):
        engine._drive(agent, writer, journal, head.input, check=head.key_check, verify=True)


def _outside_calls(recorded: list[Recorded], target: int) -> int:
    """A position inside a tool call (between its intent and its outcome) means just
    before the call."""
    open_at: dict[int, int] = {}
    for r in recorded[:target]:
        e = r.event
        if isinstance(e, ev.ToolInvoked):
            open_at[e.call] = r.position
        elif isinstance(e, ev.ToolSucceeded) or (isinstance(e, ev.ToolFailed) and e.final):
            open_at.pop(e.call, None)
    return min(open_at.values()) - 1 if open_at else target
