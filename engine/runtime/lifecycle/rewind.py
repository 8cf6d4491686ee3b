"""Rewind: fork a new run from a position of an old one (lineage recorded) and continue
the fork. What happens to the parent's side effects after that position is the
caller's choice (``forks.MODES``)."""

from __future__ import annotations

import contextlib
import uuid

import msgspec

from ... import events as ev
from ...errors import UsageError
from ...kinds import Effects
from ...log.effects import Effect, answered, effects
from ...log.history import RunWriter, read_events, resolve_position
from ...log.state import RunState
from ...log.subtree import below, fork_effects
from ...store import Recorded
from ..call import forks
from ..defs import registry
from ..defs.definitions import AgentDef, ToolDef
from ..journal.recorded import Journal
from ..run.repository import LoadedRun, RunRepository
from ..run.results import RunResult
from ..undo.saga import CannotUndo, Saga, Step, undo_takes_key
from .driver import Driver

# Events that belong to the parent's life, not to the calls a fork inherits (a pause on
# a child's question, a wait on a child or a timer: the fork waits again for itself).
_LIFECYCLE = (
    ev.AgentStarted,
    ev.AgentResumed,
    ev.AgentFinished,
    ev.AgentFailed,
    ev.AgentAbandoned,
    ev.ChildPaused,
    ev.RunWaiting,
)


def rewind(
    runs: RunRepository, driver: Driver, run_id: str, to: int | str, effects: str = forks.REUSE
) -> RunResult:
    """Fork a new run holding the parent's calls up to ``to``, then continue the fork.

    The parent's side effects after ``to``: ``reuse`` takes each over when the fork makes
    the same call, ``compensate`` undoes them first (recorded in the parent), ``resend``
    sends them again under the fork's keys. The result names those that still stand."""
    if effects not in forks.MODES:
        raise UsageError(f"effects must be one of {', '.join(forks.MODES)}, not {effects!r}")
    run = runs.load(runs.resolve(run_id), "be rewound")
    target = resolve_position(run.state, to, run.recorded)
    assert target is not None
    target = outside_calls(run.recorded, target)
    fork_id = uuid.uuid4().hex
    inherited = [r.event for r in run.recorded[1:target] if not isinstance(r.event, _LIFECYCLE)]
    head = _fork_head(run, fork_id, target, Effects(effects), inherited=len(inherited))
    agent = run.agent
    driver.replays(runs.store, agent, run.run_id, [head, *inherited])  # changed code: no fork
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
        writer.append(head, *inherited)
        journal = Journal.from_events(read_events(runs.store, fork_id))
        result = driver.drive(agent, writer, journal, head.input, check=head.key_check)
    stands, reused = fork_effects(runs.store, fork_id)
    return msgspec.structs.replace(
        result, standing=tuple(stands), reused=tuple(reused), compensated=tuple(undone)
    )


def _fork_head(
    parent: LoadedRun, fork_id: str, target: int, effects: Effects, inherited: int
) -> ev.AgentStarted:
    """The fork's ``agent_started``: the parent's agent, input, code version and replay
    key check (the inherited calls were hashed under its key), and the lineage."""
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
