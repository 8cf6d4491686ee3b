"""The run tree: a run and the child runs below it, each with where it stands.

A child is a run whose ``agent_started`` names a parent and no fork position; a fork
names a parent too (the run index cannot tell them apart) and is not a child. The tree is
read breadth first, one level at a time (no recursion), each node's state folded by
:func:`engine.log.history.rebuild`; a run met twice means a forged parent chain that loops,
and is one ``CorruptData``. Nodes below ``depth`` levels are cut (``truncated``).
"""

from __future__ import annotations

import msgspec

from ... import events as ev
from ...errors import CorruptData, UsageError
from ...kinds import FINAL, LineageKind
from ...log.history import check_run_id, rebuild, run_stream
from ...log.state import ChildOf, Lineage, Root, RunState
from ...log.waiting import WaitingOn
from ...store import RunRow, Store

MAX_DEPTH = 100  # levels shown below the root: JSON encoders recurse once per level
STEP_TAIL = 256  # events read back from a run's end to find its open step


class RunNode(msgspec.Struct, frozen=True):
    """One run of the tree: ``step`` is the step started and not completed yet (within
    the last :data:`STEP_TAIL` events), else the plan's progress (``"plan 2/5"``);
    ``waiting`` what a paused or waiting run waits on; ``children`` the child runs it
    spawned, oldest first; ``truncated`` says they were not read (past the depth bound)."""

    run_id: str
    agent: str
    status: str
    step: str | None = None
    waiting: str | None = None
    parent_run_id: str | None = None
    waits_on: WaitingOn | None = None  # what ``waiting`` says, typed
    fork_position: int | None = None  # the root only may be a fork (of parent_run_id)
    lineage: Lineage = Root()  # the root only may be a fork or another's child
    truncated: bool = False
    children: tuple[RunNode, ...] = ()

    def walk(self) -> list[RunNode]:
        """This node and every node below it, parents before their children."""
        found, stack = [], [self]
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(reversed(node.children))
        return found


def tree(store: Store, run_id: str, depth: int = MAX_DEPTH) -> RunNode:
    """The tree of ``run_id`` (an existing run's full id) down to ``depth`` levels below
    it; a node at that depth with children of its own is ``truncated``."""
    states = {run_id: _state(store, run_id)}
    kids: dict[str, list[str]] = {}
    level = [run_id]
    for _ in range(depth):
        below: list[str] = []
        for parent in level:
            kids[parent] = _children(store, parent, states, run_id)
            below += kids[parent]
        level = below
    cut = {run for run in level if any(map(_child_row, store.children(run)))}  # past the bound
    kids.update((run, []) for run in level)
    return _assemble(store, run_id, states, kids, cut)


def _children(store: Store, parent: str, states: dict[str, RunState], root: str) -> list[str]:
    """The child runs of ``parent`` (its forks left out), each folded into ``states``."""
    found = []
    for row in filter(_child_row, store.children(parent)):
        child = row.run_id
        if child in states:
            raise CorruptData(
                f"run {root}: its run tree loops: run {child} is listed as a child of "
                f"{parent} and is already in the tree (a forged parent chain)"
            )
        state = _state(store, child, parent)
        if state.lineage == ChildOf(parent):
            states[child] = state
            found.append(child)
    return found


def _child_row(row: RunRow) -> bool:
    """Whether the index row of a run with a parent may be a child: not one it says is
    a fork (an older agentlog's row, with no lineage, may be either: its log tells)."""
    return row.lineage != LineageKind.FORK


def _state(store: Store, run_id: str, parent: str | None = None) -> RunState:
    """The run's state; a malformed id or an indexed run with no events is CorruptData."""
    try:
        check_run_id(run_id)
    except UsageError as e:
        raise CorruptData(f"the run index lists a child of {parent} whose id is bad: {e}") from None
    state = rebuild(store, run_id)
    if state.position == 0:
        raise CorruptData(f"run {run_id}: the run index lists it, but it has no events")
    return state


def _assemble(
    store: Store,
    root: str,
    states: dict[str, RunState],
    kids: dict[str, list[str]],
    cut: set[str],
) -> RunNode:
    """The nodes built children first (iteratively: no recursion over the depth)."""
    order, stack = [], [root]
    while stack:
        run = stack.pop()
        order.append(run)
        stack.extend(kids[run])
    built: dict[str, RunNode] = {}
    for run in reversed(order):  # every child comes after its parent in ``order``
        s = states[run]
        built[run] = RunNode(
            run_id=run,
            agent=s.agent,
            status=s.status,
            step=current_step(store, s),
            waiting=s.waiting,
            parent_run_id=s.parent_run_id,
            children=tuple(built[c] for c in kids[run]),
            waits_on=s.waits_on,
            fork_position=s.fork_position,
            lineage=s.lineage,
            truncated=run in cut,
        )
    return built[root]


def current_step(store: Store, state: RunState) -> str | None:
    """The step ``state``'s run started and has not completed (the innermost, found in
    its last :data:`STEP_TAIL` events), else its plan's progress, else None."""
    if state.status not in FINAL:
        closed: set[int] = set()
        tail = store.read(
            run_stream(state.run_id), after=max(0, state.position - STEP_TAIL), upto=state.position
        )
        for r in reversed(tail):
            e = r.event
            if isinstance(e, ev.StepCompleted):
                closed.add(e.call)
            elif isinstance(e, ev.StepStarted) and e.call not in closed:
                return e.name
    if state.plan:
        done = set(state.steps_done)
        return f"plan {sum(step in done for step in state.plan)}/{len(state.plan)}"
    return None
