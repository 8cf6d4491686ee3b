"""Rewind: fork a new run from a position of an old one (lineage recorded) and continue
the fork. What happens to the parent's side effects after that position is the
caller's choice (``forks.MODES``)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from ... import events as ev
from ...errors import NonDeterminismError, UsageError
from ...kinds import Effects, RunStatus
from ...log.effects import Effect, answered, effects
from ...log.history import RunWriter, read_events, resolve_position
from ...log.state import RunState
from ...log.subtree import below, fork_effects
from ...secrets import run_key
from ...store import Recorded
from ..call import forks
from ..defs import registry
from ..defs.definitions import AgentDef, ToolDef
from ..journal.recorded import Journal
from ..run.adoption import who
from ..run.repository import LoadedRun, RunRepository
from ..run.results import RunResult
from ..undo.saga import CannotUndo, Saga, Step, undo_takes_key
from . import forkedits
from .answer import answer as answer_run
from .driver import Driver

# Events that belong to the parent's life, not to the calls a fork inherits (a pause on
# a child's question, a wait on a child or a timer: the fork waits again for itself; a
# dry run's would-be effects and end: the fork makes those calls itself).
_LIFECYCLE = (
    ev.AgentStarted,
    ev.AgentResumed,
    ev.AgentFinished,
    ev.AgentFailed,
    ev.AgentAbandoned,
    ev.ChildPaused,
    ev.RunWaiting,
    ev.WouldSend,
    ev.DryRunStarted,
    ev.DryRunEnded,
)


class Edits(msgspec.Struct, frozen=True):
    """What a fork changes in what it inherits (``forkedits``), whether it is a dry run,
    and who asks (None: this process's user@host)."""

    values: dict[str, Any] = {}
    answer: Any = None  # the answer to the question the prefix ends on (None: none)
    dry_run: bool = False
    by: str | None = None


NO_EDITS = Edits()


def rewind(
    runs: RunRepository,
    driver: Driver,
    run_id: str,
    to: int | str | None,
    effects: str = forks.REUSE,
    edits: Edits = NO_EDITS,
) -> RunResult:
    """Fork a new run holding the parent's calls up to ``to`` (``edits`` applied), then
    continue the fork.

    The parent's side effects after ``to``: ``reuse`` takes each over when the fork makes
    the same call, ``compensate`` undoes them first (recorded in the parent), ``resend``
    sends them again under the fork's keys. The result names those that still stand."""
    if effects not in forks.MODES:
        raise UsageError(f"effects must be one of {', '.join(forks.MODES)}, not {effects!r}")
    if edits.dry_run and effects == forks.COMPENSATE:
        raise UsageError("a dry run undoes nothing: rewind with effects 'reuse' or 'resend'")
    run = runs.load(runs.resolve(run_id), "be rewound")
    driver.host.key_gate.check(runs.store, record=False)  # before hashing under our key
    fork_id = uuid.uuid4().hex
    target, events, edited = _prefix(run, fork_id, to, edits)
    later = edits.answer is not None and not any(x.kind == forkedits.ANSWER for x in edited)
    copied = len(events) - (edits.answer is not None and not later)
    head = _fork_head(run, fork_id, target, Effects(effects), copied)
    events[copied:] = [msgspec.structs.replace(e, at=head.at) for e in events[copied:]]  # own
    if edited:
        events.append(ev.ForkEdited(at=head.at, edits=edited, by=edits.by or who()))
    if edits.dry_run or run.state.dry_run:  # a dry run's fork is one too
        events.append(ev.DryRunStarted(at=head.at))
    agent = run.agent
    _replays(driver, runs, run, [head, *events], edited)  # changed code: no fork
    undone = compensate_after(runs, run.run_id, target) if effects == forks.COMPENSATE else []
    with runs.held(fork_id):
        fork = RunState(run_id=fork_id)
        fence = runs.leases.fence(fork_id)
        writer = RunWriter(
            runs.store,
            fork,
            snapshot_every=agent.snapshot_every,
            fence=fence,
            rpo=agent.rpo,
            clock=runs.clock,
            wall=runs.wall,
        )
        writer.append(head, *events)
        journal = Journal.from_events(read_events(runs.store, fork_id))
        result = driver.drive(agent, writer, journal, head.input, check=head.key_check)
    if later and result.status == RunStatus.PAUSED:  # the prefix ended before its question
        result = _answer_later(runs, driver, fork_id, edits)
    stands, reused = fork_effects(runs.store, fork_id)
    return msgspec.structs.replace(
        result, standing=tuple(stands), reused=tuple(reused), compensated=tuple(undone)
    )


def _prefix(
    run: LoadedRun, fork_id: str, to: int | str | None, edits: Edits
) -> tuple[int, list[ev.Event], list[ev.Edit]]:
    """The fork point, the events the fork starts with (the parent's up to it, edited,
    then the answer given) and the edits made."""
    target = resolve_position(run.state, to, run.recorded)
    asked = None
    if edits.answer is not None and (found := forkedits.question_at(run.recorded, target)):
        at, asked = found
        target = at if target is None else target
    if target is None:
        raise UsageError("rewind needs to= (--to): a checkpoint name or a position")
    target = outside_calls(run.recorded, target)
    kept = [r for r in run.recorded[1:target] if not isinstance(r.event, _LIFECYCLE)]
    key = run_key(run.started.key_check, fork_id)
    events, edited = forkedits.apply(kept, edits.values, target, key, _tools(run.agent))
    if asked is not None:
        answered = forkedits.answer_event(asked, edits.answer, run.wall())
        events.append(answered)
        edited.append(forkedits.answer_edit(asked, target, answered, key))
    return target, events, edited


def _answer_later(runs: RunRepository, driver: Driver, fork_id: str, edits: Edits) -> RunResult:
    """Answer the first question the fork asked (its own, or a child's) with ``answer=``,
    recorded as an edit (``fork_edited``) before the answer, and continue it."""
    with runs.held(fork_id):
        run = runs.load(fork_id, "be answered")
        asked = list(run.journal.unanswered.values())[-1:]  # none: a child's question
        call, question = (asked[0].call, asked[0].question) if asked else (0, run.state.waiting)
        key = run_key(run.started.key_check, fork_id)
        position = run.state.position
        edit = forkedits.later_edit(str(question), call, position, edits.answer, key)
        run.writer.append(ev.ForkEdited(at=run.wall(), edits=[edit], by=edits.by or who()))
    return answer_run(runs, driver, fork_id, edits.answer)


def _tools(agent: AgentDef) -> Callable[[str], ToolDef | None]:
    """The tool of that name, as ``agent`` would call it (None if it knows none)."""

    def tool_of(name: str) -> ToolDef | None:
        return registry.tool_for(agent, name)

    return tool_of


def _replays(
    driver: Driver,
    runs: RunRepository,
    run: LoadedRun,
    events: list[ev.Event],
    edited: list[ev.Edit],
) -> None:
    """Replay the fork's first events against the code before writing anything; with
    edits, a divergence is the edit's (the code now takes another path before the fork
    point): refused, naming where to fork instead."""
    try:
        driver.replays(runs.store, run.agent, run.run_id, events)
    except NonDeterminismError as e:
        if not edited:
            raise
        first = min(x.position for x in edited)
        raise UsageError(
            f"with {', '.join(repr(x.name) for x in edited)} set, the code does not replay "
            f"the fork's calls ({e}): a value must fit the type its call declares, and a "
            f"fork whose code takes another path after it forks at position {first}"
        ) from None


def _fork_head(
    parent: LoadedRun, fork_id: str, target: int, effects: Effects, inherited: int
) -> ev.AgentStarted:
    """The fork's ``agent_started``: the parent's agent, input, code version and replay
    key check (the inherited calls were hashed under its key), and the lineage; its
    ``version`` is the agent's now (the code that runs the fork)."""
    started = parent.started
    return ev.AgentStarted(
        at=parent.wall(),
        agent=parent.agent_name,
        import_path=parent.import_path,
        input=started.input,
        parent_run_id=parent.run_id,
        fork_position=target,
        code_version=started.code_version,
        inherited=inherited,
        effects=effects,
        key_check=started.key_check,
        run_id=fork_id,
        rpo_calls=started.rpo_calls,
        rpo_s=started.rpo_s,
        version=parent.agent.release,
    )


def compensate_after(runs: RunRepository, run_id: str, target: int) -> list[Effect]:
    """Undo the effects after ``target`` of the parent and of the descendants it started
    after it, deepest first, each run's last first, each undo recorded in its own run;
    the effects undone (naming their runs). One that cannot be undone safely, anywhere in
    the subtree, raises UsageError naming it before anything is undone when that is
    known up front; the logs show what was undone."""
    with contextlib.ExitStack() as held:
        todo: list[tuple[Saga, list[Step]]] = []
        for rid, after in below(runs.store, run_id, target):
            held.enter_context(runs.held(rid))
            run = runs.load(rid, "be rewound")
            saga = Saga(run.writer)
            found = effects(run.recorded, after=after)[::-1]
            todo.append((saga, _steps(saga, run.agent, found, rid)))
        done: list[Effect] = []
        for saga, steps in todo:
            for effect, tool in steps:
                _undo(saga, effect, tool)
                done.append(msgspec.structs.replace(effect, run_id=saga.run_id))
        return done


def _steps(saga: Saga, agent: AgentDef, found: list[Effect], rid: str) -> list[Step]:
    try:
        return _undoable(saga, agent, found)
    except CannotUndo as stop:
        raise _stopped(stop, rid) from None


def _undo(saga: Saga, effect: Effect, tool: ToolDef) -> None:
    try:
        saga.undo(effect, tool)
    except CannotUndo as stop:
        raise _stopped(stop, saga.run_id) from None


def _stopped(stop: CannotUndo, rid: str) -> UsageError:
    return UsageError(
        f"rewind stopped, nothing forked: {stop.message} (run {rid}); "
        "rewind with effects 'reuse' or 'resend' (CLI --effects), or undo it by hand"
    )


def _undoable(saga: Saga, agent: AgentDef, after: list[Effect]) -> list[Step]:
    """Of the parent's effects ``after`` the target (last first), those to undo, with
    their tools; raises CannotUndo for the first that cannot be undone safely (no
    compensation, unknown outcome without a verifier, an interrupted undo without a key)."""
    todo: list[Step] = []
    for effect in after:
        if effect.undone or not (effect.own or effect.uncertain):
            continue  # undone already, or not the parent's own (ledger, its own parent)
        tool = registry.tool_for(agent, effect.tool)
        if tool is None or tool.compensate is None:
            raise CannotUndo(effect, f"{effect.tool} (call {effect.call}) has no compensation")
        settled = saga.settle(effect, tool) if effect.uncertain else effect
        if settled is None:
            continue
        undo_takes_key(settled, tool)  # known up front: stop before undoing anything
        todo.append((settled, tool))
    return todo


def outside_calls(recorded: list[Recorded], target: int) -> int:
    """A position inside a tool call (between its intent and its outcome) or inside a
    lock block (between ``lock_acquired`` and ``lock_released``) means just before it:
    a fork never inherits an open lock block (the parent's fence), it takes the lock
    afresh under a new fence."""
    open_at: dict[int, int] = {}
    for r in recorded[:target]:
        e = r.event
        if isinstance(e, ev.ToolInvoked | ev.LockAcquired):
            open_at[e.call] = r.position
        elif isinstance(e, ev.LockReleased):
            open_at.pop(e.call, None)
        elif (call := answered(e)) is not None:
            open_at.pop(call, None)
    return min(open_at.values()) - 1 if open_at else target
