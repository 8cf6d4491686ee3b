"""What a fork rewound with ``effects="reuse"`` takes over from its parent.

The parent's side effects after the fork position stay in the world. When the fork makes
a side-effecting call its parent made there (same tool, same arguments), it takes the
parent's effect instead of sending a second one: each parent effect at most once, the
earliest matching one in the parent's call order. A fork's log says which it took (the
intent's ``parent_call``), so a resumed fork never takes one twice. A durable message
the parent sent there (``run.send``, same recipient, topic and value) is taken over the
same way: the fork records the parent's message id and posts nothing.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..effects import Effect, Outcome, effects, sends
from ..history import read_events, started
from ..kinds import Effects, Source

if TYPE_CHECKING:
    from .context import RunContext

REUSE, COMPENSATE, RESEND = Effects.REUSE, Effects.COMPENSATE, Effects.RESEND
MODES = tuple(Effects)


class Inheritance:
    """The parent's effects a fork may still take over, in the parent's call order."""

    def __init__(self, left: list[Effect]) -> None:
        self._left = left
        self._lock = threading.Lock()

    def take(self, tool: str, args_hash: str) -> Effect | None:
        """The first parent effect of ``tool`` with these arguments not taken yet."""
        with self._lock:
            for i, fx in enumerate(self._left):
                if fx.tool == tool and fx.args_hash == args_hash:
                    return self._left.pop(i)
        return None


NOTHING = Inheritance([])


def inheritance(ctx: RunContext) -> Inheritance:
    """The run's inheritance, read once per execution (nothing for a run that is not a
    fork rewound with ``effects="reuse"``)."""
    with ctx.inheritance_lock:  # concurrent calls of an async agent share one pool
        if ctx.inheritance is None:
            ctx.inheritance = _read(ctx) if ctx.writer.state.fork_position is not None else NOTHING
        inherited: Inheritance = ctx.inheritance
    return inherited


def _read(ctx: RunContext) -> Inheritance:
    head = started(ctx.store, ctx.run_id)
    if head.effects != REUSE:
        return NOTHING
    assert head.parent_run_id is not None
    taken = {e.parent_call for e in ctx.journal.calls.values() if e.parent_call is not None}
    parent = read_events(ctx.store, head.parent_run_id)
    after = head.fork_position or 0
    left = [
        fx
        for fx in sorted([*effects(parent, after), *sends(parent, after)], key=lambda fx: fx.call)
        if fx.call not in taken and reusable(fx)
    ]
    return Inheritance(left)


def reusable(fx: Effect) -> bool:
    """A parent effect a fork's same call stands for: one that happened (or may have),
    not undone or being undone, and not a fallback (which sent nothing of the tool)."""
    if fx.undone or fx.undo_open:
        return False
    if fx.outcome == Outcome.COMMITTED:
        return fx.source != Source.FALLBACK
    return fx.uncertain
