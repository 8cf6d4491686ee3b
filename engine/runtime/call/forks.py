"""What a fork rewound with ``effects="reuse"`` takes over from its parent, and what a
run a supervisor started in place of an abandoned child takes over from it (``reuses``).

The parent's side effects after the fork position stay in the world. When the fork makes
a side-effecting call its parent made there (same tool, same arguments), it takes the
parent's effect instead of sending a second one: each parent effect at most once, the
earliest matching one in the parent's call order. A fork's log says which it took (the
intent's ``parent_call``), so a resumed fork never takes one twice. A durable message
the parent sent there (``run.send``, same recipient, topic and value) is taken over the
same way: the fork records the parent's message id and posts nothing. A restart's new run
does the same with every effect still standing in the run it replaces, and in that run's
own predecessors (those none of their successors took over); its intents also name the
run they took from (``parent_run``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ... import events as ev
from ... import observe
from ...kinds import Effects, RunStatus, Source
from ...log.effects import Effect, Outcome, effects, sends
from ...log.history import read_events, started
from ...log.state import ChildOf, ForkOf, Root, lineage_of
from ...store import Store

if TYPE_CHECKING:
    from ..run.context import RunContext
    from ..run.results import RunResult

REUSE, COMPENSATE, RESEND = Effects.REUSE, Effects.COMPENSATE, Effects.RESEND
MODES = tuple(Effects)

# An effect another run made that this one may take over: that run (None: a fork's
# parent) and the effect.
Inherited = tuple[str | None, Effect]


class Inheritance:
    """The effects a run may still take over, in the order they are offered."""

    def __init__(self, left: list[Inherited]) -> None:
        self._left = left
        self._lock = threading.Lock()

    def take(self, tool: str, args_hash: str) -> Inherited | None:
        """The first effect of ``tool`` with these arguments not taken yet."""
        with self._lock:
            for i, (_, fx) in enumerate(self._left):
                if fx.tool == tool and fx.args_hash == args_hash:
                    return self._left.pop(i)
        return None


NOTHING = Inheritance([])


def inheritance(ctx: RunContext) -> Inheritance:
    """The run's inheritance, read once per execution (nothing for a run that is neither
    a fork rewound with ``effects="reuse"`` nor a restart's new run)."""
    with ctx.inheritance_lock:  # concurrent calls of an async agent share one pool
        if ctx.inheritance is None:
            state = ctx.writer.state
            inherits = not isinstance(state.lineage, Root)
            ctx.inheritance = _read(ctx) if inherits else NOTHING
        inherited: Inheritance = ctx.inheritance
    return inherited


def _read(ctx: RunContext) -> Inheritance:
    head = started(ctx.store, ctx.run_id)
    mine = [e.intent for e in ctx.journal.calls.values() if e.intent is not None]
    if head.reuses is not None:
        return Inheritance(_replaced(ctx.store, head.reuses, mine))
    fork = lineage_of(head)
    if head.effects != REUSE or not isinstance(fork, ForkOf):
        return NOTHING
    # a fork's calls (tools and sends) name the parent's call they took over
    taken = {c.parent_call for c in ctx.journal.calls.values() if c.parent_call is not None}
    parent = read_events(ctx.store, fork.parent_run_id)
    after = fork.fork_position
    left = sorted([*effects(parent, after), *sends(parent, after)], key=lambda fx: fx.call)
    return Inheritance([(None, fx) for fx in left if fx.call not in taken and reusable(fx)])


def _replaced(store: Store, first: str, mine: Iterable[ev.Event | None]) -> list[Inherited]:
    """The effects a restart's new run may take over: those of the run it replaced, then
    those its predecessors made that no run after them took over (a run stopped before
    it made a call the one before it had made), nearest first, each once."""
    taken = _took(mine, first)
    pool: list[Inherited] = []
    rid: str | None = first
    seen: set[str] = set()
    while rid is not None and rid not in seen:
        seen.add(rid)
        log = read_events(store, rid)
        head = log[0].event if log else None
        before = head.reuses if isinstance(head, ev.AgentStarted) else None
        pool += [(rid, fx) for fx in effects(log)]
        taken |= _took((r.event for r in log if isinstance(r.event, ev.ToolInvoked)), before)
        rid = before
    return [(r, fx) for r, fx in pool if (r, fx.call) not in taken and reusable(fx)]


def replaced_child(ctx: RunContext, call: int, agent: str, args_hash: str) -> str | None:
    """The child a restart's new run stands in for at its spawn ``call`` of ``agent`` on
    these arguments: the child doing that spawn's work in the nearest run it replaces that
    made the same spawn at the same call (so the new child takes over its effects); None
    when there is none or this run is no restart's."""
    if not isinstance(ctx.writer.state.lineage, ChildOf):  # a restart's new run is one
        return None
    rid, seen = started(ctx.store, ctx.run_id).reuses, set()
    while rid is not None and rid not in seen:
        seen.add(rid)
        log = [r.event for r in read_events(ctx.store, rid)]
        spawn = next((e for e in log if isinstance(e, ev.ChildSpawned) and e.call == call), None)
        if spawn is not None:
            if (spawn.agent, spawn.args_hash) != (agent, args_hash):
                return None
            now = [e for e in log if isinstance(e, ev.ChildRestarted) and e.call == call]
            return now[-1].child_run_id if now else spawn.child_run_id
        head = log[0]
        rid = head.reuses if isinstance(head, ev.AgentStarted) else None
    return None


def _took(intents: Iterable[ev.Event | None], source: str | None) -> set[tuple[str | None, int]]:
    """The effects (run, call) ``intents`` took over; ``source`` is the run an intent took
    from when it names none."""
    return {
        (i.parent_run or source, i.parent_call)
        for i in intents
        if isinstance(i, ev.ToolInvoked) and i.parent_call is not None
    }


def after_run(store: Store, result: RunResult) -> None:
    """A restart's new run completed: warn, naming each, of the effects of the runs it
    replaced that still stand and that it did not take over (it made other calls), so
    nobody takes a second effect for the only one."""
    if result.status != RunStatus.COMPLETED or result.parent_run_id is None:
        return
    log = observe.get(run_id=result.run_id)
    try:
        head = started(store, result.run_id)
        if head.reuses is None:
            return
        mine = [r.event for r in read_events(store, result.run_id)]
        left = _replaced(store, head.reuses, mine)
    except Exception as e:  # a warning never fails the run's end (the store may be gone)
        log.error("restart_effects_not_checked", error=str(e))
        return
    for rid, fx in left:
        log.warning(
            "restart_left_effect_standing", replaced=rid, tool=fx.tool, call=fx.call, key=fx.key
        )


def reusable(fx: Effect) -> bool:
    """A parent effect a fork's same call stands for: one that happened (or may have),
    not undone or being undone, and not a fallback (which sent nothing of the tool)."""
    if fx.undone or fx.undo_open:
        return False
    if fx.outcome == Outcome.COMMITTED:
        return fx.source != Source.FALLBACK
    return fx.uncertain
