"""The side effects of a run's subtree: a run's own after a position and those of every
descendant it started after it, deepest first (each later-started child's subtree before
an earlier one's, all before the run's own, each run's last first), which is the order
they are undone in. ``standing`` tells which of a fork's parent's still stand."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .. import events as ev
from ..errors import CorruptData
from ..store import Recorded, Store
from .effects import Effect, after_fork, effects, sends
from .history import read_events, started
from .state import ChildOf, ForkOf, lineage_of


def spawned_after(recorded: Iterable[Recorded], after: int = 0) -> list[str]:
    """The child runs a run's log names (spawned, or started by a restart) after
    position ``after`` (all of them by default), in the order it started them: the one
    reading of a run's children from its log."""
    found: dict[str, None] = {}
    for r in recorded:
        if r.position > after and isinstance(r.event, ev.ChildSpawned | ev.ChildRestarted):
            found.setdefault(r.event.child_run_id, None)
    return list(found)


def below(store: Store, run_id: str, after: int = 0) -> list[tuple[str, int]]:
    """The run and the descendants it started after ``after``, deepest first, each with
    the position its effects count from (``after`` for the run, 0 for a descendant). A
    fork's inherited spawns name its parent's children: they are not the fork's."""
    order: list[tuple[str, int]] = []
    seen = {run_id}
    todo: list[tuple[str, int, bool]] = [(run_id, after, False)]
    while todo:  # an explicit stack: a deep tree does not recurse
        rid, start, expanded = todo.pop()
        if expanded:
            order.append((rid, start))
            continue
        todo.append((rid, start, True))
        for child in spawned_after(read_events(store, rid), start):
            head = started(store, child)
            if lineage_of(head) != ChildOf(rid):
                continue
            if child in seen:  # forged rows: a run its own ancestor
                raise CorruptData(f"run {run_id}: its run tree loops (through {child})")
            seen.add(child)
            todo.append((child, 0, False))  # popped latest started first
    return order


def tree_effects(
    store: Store, run_id: str, after: int = 0, *, messages: bool = False
) -> list[Effect]:
    """The effects of the run after ``after`` and of its descendants started after it,
    deepest first, each naming its run (``Effect.run_id``); with ``messages``, their
    durable sends too (which nothing undoes)."""
    found: list[Effect] = []
    for rid, start in below(store, run_id, after):
        log = read_events(store, rid)
        own = effects(log, start)
        if messages:
            own = sorted([*own, *sends(log, start)], key=lambda fx: fx.call)
        found += [msgspec.structs.replace(fx, run_id=rid) for fx in reversed(own)]
    return found


def fork_effects(store: Store, run_id: str) -> tuple[list[Effect], list[Effect]]:
    """For a fork, the effects of its parent's subtree after the fork's position (its
    durable sends among them), deepest first, split in two: those that still stand, and
    those the fork took over (reused); both empty for a run that is not a fork."""
    head = started(store, run_id)  # most runs are not forks: one event read
    fork = lineage_of(head)
    if not isinstance(fork, ForkOf):  # a root or a child
        return [], []
    parent = tree_effects(store, fork.parent_run_id, fork.fork_position, messages=True)
    mine = tree_effects(store, run_id, messages=True)
    return after_fork(parent, mine, fork.parent_run_id)


def standing(store: Store, run_id: str) -> list[Effect]:
    """For a fork, the effects of its parent's subtree after its position that still
    stand, deepest first; empty for a run that is not a fork."""
    return fork_effects(store, run_id)[0]
