"""The difference between two runs, or two positions of one run: which fields of the
folded state differ and which calls (tools, decisions, steps, checkpoints, questions)
were made differently, starting from the first call where the branches part.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import RunState
from engine import events as ev
from engine.log.history import checkpoint_refs
from engine.runtime.schedules.cadence import parse_tick

from .output import Piece, brief
from .timeline import views

if TYPE_CHECKING:
    from engine.runtime.run.catalog import Catalog

_SKIP = {"run_id", "started_at", "updated_at", "position"}


@dataclass(frozen=True)
class Side:
    """One side of a diff: a run at a position."""

    run_id: str
    position: int
    state: RunState
    calls: dict[int, dict[str, Any]]
    beside: dict[str, Any]  # what the log keeps beside the state: input, checkpoints


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``RUN`` or ``RUN@POSITION|NAME``. A schedule's run id holds an ``@`` of its own
    (``nightly@2026-12-03T02:00:00Z``): the last ``@`` splits, unless a tick follows it."""
    run, sep, at = spec.rpartition("@")
    if not sep or parse_tick(at) is not None:
        return spec, None
    return run, at


def side(engine: Catalog, spec: str) -> Side:
    run, at = parse_spec(spec)
    state = engine.state(run, at=at)
    events = [r for r in views(engine, state.run_id) if r.position <= state.position]
    first = events[0].event if events else None
    beside = {
        "input": first.input if isinstance(first, ev.AgentStarted) else {},
        # By name, in order: a fork renumbers positions (it leaves the parent's lifecycle
        # events out), so the same checkpoints sit at other positions.
        "checkpoints": [c.name for c in checkpoint_refs(events)],
    }
    return Side(state.run_id, state.position, state, calls_of(events), beside)


def calls_of(events: Iterable[ev.Positioned]) -> dict[int, dict[str, Any]]:
    """What each call identity did, as comparable plain data."""
    calls: dict[int, dict[str, Any]] = {}
    for r in events:
        _fold_call(calls, r.event)
    return calls


def _fold_call(calls: dict[int, dict[str, Any]], e: ev.Event) -> None:
    """Fold one event into ``calls`` (events of no call identity, undo records and the
    ledger's change nothing)."""
    match e:
        case ev.ToolInvoked():
            calls[e.call] = {"kind": "tool", "name": e.tool, "args": e.args}
        case ev.ToolSucceeded():
            calls.setdefault(e.call, {"kind": "tool", "name": e.tool})["result"] = e.result
        case ev.ToolFailed(final=True):
            calls.setdefault(e.call, {"kind": "tool", "name": e.tool})["failed"] = e.kind
        case ev.LlmDecided():
            calls[e.call] = {"kind": "decide", "name": e.name, "value": e.value}
        case ev.PlanCreated():
            calls[e.call] = {"kind": "plan", "name": "plan", "steps": e.steps}
        case ev.StepStarted():
            calls[e.call] = {"kind": "step", "name": e.name}
        case ev.StepCompleted():
            calls.setdefault(e.call, {"kind": "step", "name": e.name})["completed"] = True
        case ev.Checkpoint():
            calls[e.call] = {"kind": "checkpoint", "name": e.name}
        case ev.HumanInputRequested():
            calls.setdefault(e.call, {"kind": "ask", "name": e.question})
        case ev.HumanInputProvided():
            calls.setdefault(e.call, {"kind": "ask", "name": "?"})["answer"] = e.value


def _state_fields(side: Side) -> dict[str, Any]:
    state = side.state
    doc = {f: getattr(state, f) for f in state.__struct_fields__ if f not in _SKIP}
    doc.update(side.beside)
    doc["pending"] = [(p.call, p.tool) for p in state.pending]
    return doc


def compare(left: Side, right: Side) -> dict[str, Any]:
    """The diff document (also the ``--json`` shape)."""
    lf, rf = _state_fields(left), _state_fields(right)
    fields = {k: {"left": lf[k], "right": rf[k]} for k in lf if lf[k] != rf.get(k)}
    numbers = sorted(set(left.calls) | set(right.calls))
    same = 0
    differ = []
    for n in numbers:
        a, b = left.calls.get(n), right.calls.get(n)
        if a == b:
            same += 1
            continue
        differ.append({"call": n, "left": a, "right": b})
    return {
        "left": {"run_id": left.run_id, "position": left.position, "status": left.state.status},
        "right": {"run_id": right.run_id, "position": right.position, "status": right.state.status},
        "state": fields,
        "same_calls": same,
        "calls": differ,
    }


def render(doc: dict[str, Any]) -> list[list[Piece]]:
    """The diff as text lines."""
    rows: list[list[Piece]] = []
    for label in ("left", "right"):
        s = doc[label]
        rows.append(
            [(f"{label:<6}", "bold"), s["run_id"], f" at position {s['position']} ({s['status']})"]
        )
    if not doc["state"] and not doc["calls"]:
        rows.append([("no differences: same state and the same calls", "green")])
        return rows
    rows.append([("state fields that differ:", "bold")])
    for name, pair in doc["state"].items():
        rows.append(
            [
                f"  {name:<18}",
                (brief(pair["left"], 50), "red"),
                "  ->  ",
                (brief(pair["right"], 50), "green"),
            ]
        )
    if not doc["state"]:
        rows.append([("  (none)", "dim")])
    rows.append([(f"calls ({doc['same_calls']} identical; they part at the first below):", "bold")])
    for c in doc["calls"]:
        rows.append([f"  call {c['call']:<4} ", ("- " + _call(c["left"]), "red")])
        rows.append([f"  {'':<9} ", ("+ " + _call(c["right"]), "green")])
    if not doc["calls"]:
        rows.append([("  (none)", "dim")])
    return rows


def _call(c: dict[str, Any] | None) -> str:
    if c is None:
        return "(no such call)"
    rest = {k: v for k, v in c.items() if k not in ("kind", "name")}
    return f"{c['kind']} {c['name']!r} {brief(rest, 90) if rest else ''}".rstrip()
