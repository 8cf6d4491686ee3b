"""Acts on a run's life beyond running it: answer a question, abandon (saga undo), and
rewind (fork a new run from a position of an old one, lineage recorded)."""

from __future__ import annotations

import contextlib
import inspect
import uuid
from typing import TYPE_CHECKING, TypeVar

import msgspec

from .. import events as ev
from .. import failpoints
from ..errors import UsageError
from ..history import RunWriter, read_run, resolve_position, run_stream
from ..policy import describe
from ..state import RunState, fold
from ..store import Recorded
from . import calls, ledger, registry
from .context import LogEnd
from .defs import AgentDef, normalize
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
    if state.status != "paused" or state.waiting is None:
        raise UsageError(f"run {rid} is not waiting for an answer (it is {state.status})")
    asked = [r.event for r in recorded if isinstance(r.event, ev.HumanInputRequested)]
    call = asked[-1].call
    value = normalize(value, "the answer")
    if asked[-1].reason == "uncertain":
        calls.check_uncertain_answer(value)  # nothing is recorded for an unclear answer
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    agent = registry.load_agent(started.agent, started.import_path)
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
    if state.status == "completed":
        raise UsageError(f"run {rid} has completed; there is nothing to abandon")
    if state.status == "abandoned":
        return RunResult(rid, "abandoned", error=state.error)
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    agent = registry.load_agent(started.agent, started.import_path)
    writer = RunWriter(engine.store, state, snapshot_every=agent.snapshot_every)
    undone = {e.call for e in _events(recorded, ev.Compensated) if e.error is None}
    interrupted = _interrupted_undos(recorded)
    # Effects a previous abandon flagged as unknowable: abandoning again is a person's
    # word that they were checked by hand, so they are skipped (recorded as such).
    flagged = {e.call for e in _events(recorded, ev.AgentFailed) if e.kind == UNDO_UNKNOWN}
    effects, unknown = _committed_effects(recorded), _uncertain_effects(recorded)
    for call, intent in unknown:  # an effect whose outcome a crash left unknown
        tool = registry.TOOLS.get(intent.tool)
        if tool is None or tool.compensate is None:
            continue
        if tool.verify is None or intent.key is None:
            what = (
                f"{intent.tool} (call {call}, key {intent.key}) has an unknown outcome "
                "and no verifier"
            )
            stop = _unknowable(writer, call, intent.tool, what, flagged)
            if stop is not None:
                return stop
            continue
        found = tool.verify(intent.key)
        if found is None:  # it never happened: nothing to undo, and its key is free
            key_state = ledger.read(engine.store, intent.key)
            if tool.key is not None and key_state.owned_by(rid, call):
                release = ledger.release_event(key_state, intent.key, rid, call, "not done")
                engine.store.append([release])
        else:
            found = normalize(found, f"verified result of {intent.tool}")
            writer.append(
                ev.ToolSucceeded(
                    at=ev.now(), call=call, tool=intent.tool, result=found, source="verified"
                )
            )
            effects.append((call, intent, found))
    for call, intent, result in sorted(effects, key=lambda e: e[0], reverse=True):
        tool = registry.TOOLS.get(intent.tool)
        if call in undone or tool is None or tool.compensate is None:
            continue
        takes_key = "idempotency_key" in inspect.signature(tool.compensate).parameters
        if call in interrupted and not takes_key:
            what = (
                f"compensation of {intent.tool} (call {call}) was interrupted "
                "and its outcome is unknown"
            )
            stop = _unknowable(writer, call, intent.tool, what, flagged)
            if stop is not None:
                return stop
            continue
        writer.append(
            ev.CompensationStarted(at=ev.now(), call=call, tool=intent.tool, key=intent.key)
        )
        kwargs = {"idempotency_key": f"undo:{intent.key}"} if takes_key else {}
        try:
            undo = normalize(tool.compensate(result, **kwargs), f"compensation of {intent.tool}")
        except Exception as e:
            message = describe(e)
            writer.append(ev.Compensated(at=ev.now(), call=call, tool=intent.tool, error=message))
            return _stuck(
                writer, call, f"compensation of {intent.tool} (call {call}) failed: {message}"
            )
        failpoints.hit("in_compensation")
        extra = []
        if intent.key and tool.key is not None:
            key_state = ledger.read(engine.store, intent.key)
            if key_state.owned_by(rid, call):
                extra.append(ledger.release_event(key_state, intent.key, rid, call, "compensated"))
        writer.append(
            ev.Compensated(at=ev.now(), call=call, tool=intent.tool, result=undo), extra=extra
        )
    writer.append(ev.AgentAbandoned(at=ev.now(), reason="abandoned by request"))
    return RunResult(rid, "abandoned")


UNDO_UNKNOWN = "undo_unknown"  # the kind of a failure that stops an abandon for a person


def _stuck(writer: RunWriter, call: int, message: str, kind: str = "permanent") -> RunResult:
    """Abandoning cannot finish safely: the run fails, naming the effect; abandon retries."""
    writer.append(ev.AgentFailed(at=ev.now(), call=call, kind=kind, error=message))
    return RunResult(writer.state.run_id, "failed", error=message)


def _unknowable(
    writer: RunWriter, call: int, tool: str, what: str, flagged: set[int | None]
) -> RunResult | None:
    """An effect abandon cannot undo safely: the first abandon stops naming it; once a
    person has seen that (``flagged``), it is left as it is, recorded, and abandon goes on."""
    if call not in flagged:
        message = f"{what}: check it by hand, then abandon again to leave it as it is"
        return _stuck(writer, call, message, kind=UNDO_UNKNOWN)
    message = "not undone: its outcome is unknown; left as it is on a person's word"
    writer.append(ev.Compensated(at=ev.now(), call=call, tool=tool, error=message))
    return None


_E = TypeVar("_E", bound=ev.Event)


def _events(recorded: list[Recorded], kind: type[_E]) -> list[_E]:
    return [r.event for r in recorded if isinstance(r.event, kind)]


def _interrupted_undos(recorded: list[Recorded]) -> set[int]:
    """Calls whose latest compensation_started has no compensated after it (an undo that
    was retried after a failure and then interrupted counts too)."""
    open_undos: set[int] = set()
    for r in recorded:
        if isinstance(r.event, ev.CompensationStarted):
            open_undos.add(r.event.call)
        elif isinstance(r.event, ev.Compensated):
            open_undos.discard(r.event.call)
    return open_undos


def _uncertain_effects(recorded: list[Recorded]) -> list[tuple[int, ev.ToolInvoked]]:
    """Side-effect intents with no outcome (latest intent per call)."""
    intents: dict[int, ev.ToolInvoked] = {}
    for r in recorded:
        e = r.event
        if isinstance(e, ev.ToolInvoked) and e.side_effect:
            intents[e.call] = e
        elif isinstance(e, ev.ToolSucceeded) or (isinstance(e, ev.ToolFailed) and e.final):
            intents.pop(e.call, None)
    return sorted(intents.items())


def _committed_effects(recorded: list[Recorded]) -> list[tuple[int, ev.ToolInvoked, object]]:
    """Side effects this run itself committed: not outcomes borrowed from the ledger, and
    for a fork not the parent's effects it inherited (the parent's abandon undoes those)."""
    started = recorded[0].event
    own_from = 2 + (started.inherited if isinstance(started, ev.AgentStarted) else 0)
    intents: dict[int, ev.ToolInvoked] = {}
    out: list[tuple[int, ev.ToolInvoked, object]] = []
    for r in recorded:
        if r.position < own_from:
            continue
        e = r.event
        if isinstance(e, ev.ToolInvoked) and e.side_effect:
            intents[e.call] = e
        elif (
            isinstance(e, ev.ToolSucceeded)
            and e.call in intents
            and e.source not in ("ledger", "fallback")  # not this run's effect to undo
        ):
            out.append((e.call, intents[e.call], e.result))
    return out


def rewind(engine: Engine, run_id: str, to: int | str) -> RunResult:
    """Fork a new run holding the parent's calls up to ``to``, then continue the fork."""
    rid, recorded, state = _load(engine, run_id)
    target = resolve_position(state, to)
    assert target is not None
    target = _outside_calls(recorded, target)
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    agent = registry.load_agent(started.agent, started.import_path)
    fork_id = uuid.uuid4().hex
    head = ev.AgentStarted(
        at=ev.now(),
        agent=started.agent,
        import_path=started.import_path,
        input=started.input,
        parent_run_id=rid,
        fork_position=target,
        code_version=started.code_version,
    )
    inherited = [r.event for r in recorded[1:target] if not isinstance(r.event, _LIFECYCLE)]
    head = msgspec.structs.replace(head, inherited=len(inherited))
    _replays(engine, agent, rid, [head, *inherited])
    with engine.leases.hold(engine.store, fork_id):
        writer = RunWriter(
            engine.store, RunState(run_id=fork_id), snapshot_every=agent.snapshot_every
        )
        writer.append(head, *inherited)
        journal = Journal.from_events(engine.store.read(run_stream(fork_id)))
        return engine._drive(agent, writer, journal)


def _replays(engine: Engine, agent: AgentDef, run_id: str, events: list[ev.Event]) -> None:
    """Replay ``events`` (a fork's inherited prefix, a paused run's log) against the current
    code before writing anything: code that no longer matches raises NonDeterminismError
    and leaves no orphan fork, no recorded answer."""
    recorded = [Recorded(run_stream(run_id), i + 1, e) for i, e in enumerate(events)]
    state = fold([(r.position, r.event) for r in recorded], RunState(run_id=run_id))
    with contextlib.suppress(LogEnd):
        engine._drive(
            agent, RunWriter(engine.store, state), Journal.from_events(recorded), verify=True
        )


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
