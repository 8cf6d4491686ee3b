"""The difference between two runs, or two positions of one run: which fields of the
folded state differ and which calls (tools, decisions, steps, checkpoints, questions)
were made differently, starting from the first call where the branches part.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import EventView, RunState

from .output import Piece, brief
from .timeline import views

if TYPE_CHECKING:
    from engine import Engine

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
    """``RUN`` or ``RUN@POSITION|NAME``."""
    run, sep, at = spec.partition("@")
    return run, (at if sep else None)


def side(engine: Engine, spec: str) -> Side:
    run, at = parse_spec(spec)
    state = engine.state(run, at=at)
    events = [e for e in views(engine, state.run_id) if e.position <= state.position]
    beside = {
        "input": events[0].data.get("input", {}) if events else {},
        "checkpoints": [(e.data["name"], e.position) for e in events if e.type == "checkpoint"],
    }
    return Side(state.run_id, state.position, state, calls_of(events), beside)


def calls_of(events: Iterable[EventView]) -> dict[int, dict[str, Any]]:
    """What each call identity did, as comparable plain data."""
    calls: dict[int, dict[str, Any]] = {}
    for e in events:
        d = e.data
        call = d.get("call")
        if not isinstance(call, int) or e.type.startswith(("compensat", "effect_")):
            continue
        if e.type == "tool_invoked":
            calls[call] = {"kind": "tool", "name": d["tool"], "args": d.get("args")}
        elif e.type == "tool_succeeded":
            calls.setdefault(call, {"kind": "tool", "name": d["tool"]})["result"] = d.get("result")
        elif e.type == "tool_failed" and d.get("final", True):
            entry = calls.setdefault(call, {"kind": "tool", "name": d["tool"]})
            entry["failed"] = d.get("kind")
        elif e.type == "llm_decided":
            calls[call] = {"kind": "decide", "name": d["name"], "value": d.get("value")}
        elif e.type == "plan_created":
            calls[call] = {"kind": "plan", "name": "plan", "steps": d.get("steps")}
        elif e.type == "step_started":
            calls[call] = {"kind": "step", "name": d["name"]}
        elif e.type == "step_completed":
            calls.setdefault(call, {"kind": "step", "name": d["name"]})["completed"] = True
        elif e.type == "checkpoint":
            calls[call] = {"kind": "checkpoint", "name": d["name"]}
        elif e.type == "human_input_requested":
            calls.setdefault(call, {"kind": "ask", "name": d.get("question")})
        elif e.type == "human_input_provided":
            calls.setdefault(call, {"kind": "ask", "name": "?"})["answer"] = d.get("value")
    return calls


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
