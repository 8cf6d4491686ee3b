"""The saga's undo plan is pure: from a run's typed effects and its tools it says which
effects to settle first and which to undo, last first, without touching a store."""

from __future__ import annotations

from typing import Any

from engine.log.effects import Effect
from engine.runtime.defs.definitions import ToolDef
from engine.runtime.undo.saga import last_first, plan


def _send(x: Any) -> Any:
    return x


def _void(receipt: Any) -> Any:
    return receipt


UNDOABLE = ToolDef(_send, "pay", side_effect=True, compensate=_void)
NO_UNDO = ToolDef(_send, "mail", side_effect=True)
TOOLS = {"pay": UNDOABLE, "mail": NO_UNDO}


def _fx(call: int, tool: str = "pay", **fields: Any) -> Effect:
    fields.setdefault("position", 10 + call)
    return Effect(call, tool, **fields)


def test_the_plan_settles_unknown_effects_and_undoes_only_the_runs_own_compensable_ones() -> None:
    """Unknown outcomes are settled first; committed effects are undone only when the run
    made them itself (not the ledger's, a parent's or a fallback), from ``own_from`` on,
    and their tool has a compensation."""
    own = _fx(1, outcome="committed", source="executed")
    unknown = _fx(2)
    borrowed = _fx(3, outcome="committed", source="ledger")
    mailed = _fx(4, "mail", outcome="committed", source="executed")
    inherited = _fx(5, outcome="committed", source="executed", position=3)
    failed = _fx(6, outcome="failed")
    todo = plan([own, unknown, borrowed, mailed, inherited, failed], 5, TOOLS.get)
    assert todo.settle == [(unknown, UNDOABLE)]
    assert todo.undo == [(own, UNDOABLE)]


def test_undo_order_is_last_call_first_and_skips_what_was_undone() -> None:
    first = _fx(1, outcome="committed")
    undone = _fx(2, outcome="committed", undone=True)
    last = _fx(3, outcome="committed")
    steps = [(first, UNDOABLE), (last, UNDOABLE), (undone, UNDOABLE)]
    assert [fx.call for fx, _ in last_first(steps)] == [3, 1]
