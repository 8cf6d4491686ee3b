"""A run's timeline as a story: one line per event, written as it is read.

Each line shows the position, the UTC time and the time since the run started, then
what happened: calls with their arguments and results, durations and attempts, failure
kinds and retries, checkpoints, plan progress, crashes and resumes, and fork lineage.
Events are read from the store a page at a time, so long runs stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine import EventView, RunState
from engine.history import PAGE, iter_run

from .output import Piece, brief, clock, seconds, short

if TYPE_CHECKING:
    from engine import Engine


def views(engine: Engine, run_id: str, page: int = PAGE) -> Iterator[EventView]:
    """The run's events in order, read ``page`` at a time and checked (``CorruptData``
    at the first damaged position)."""
    return (EventView.of(r) for r in iter_run(engine.store, run_id, page=page))


def json_rows(events: Iterator[EventView]) -> Iterator[dict[str, Any]]:
    """``{"position", "type", "at", ...event fields}`` per event."""
    for e in events:
        yield {"position": e.position, "type": e.type, "at": e.at, **e.data}


def header(state: RunState, children: list[tuple[str, int | None]]) -> list[list[Piece]]:
    """Who the run is and where it comes from (fork lineage both ways)."""
    rows: list[list[Piece]] = [
        [("run ", "bold"), (state.run_id, "bold"), f"  {state.agent}  ", _status(state.status)]
    ]
    if state.parent_run_id:
        rows.append(
            [
                "  forked from ",
                (state.parent_run_id, "cyan"),
                f" at position {state.fork_position}",
            ]
        )
    for child, at in children:
        rows.append(["  branch ", (child, "cyan"), f" forked from here at position {at}"])
    rows.append([(f"{'pos':>5}  {'time (UTC)':<12}  {'since start':>11}  event", "dim")])
    return rows


def _status(status: str) -> Piece:
    style = {"completed": "green", "failed": "red", "abandoned": "red", "paused": "yellow"}
    return (status, "bold " + style.get(status, "blue"))


@dataclass
class _Story:
    """What the narrator remembers while walking the events."""

    start: float | None = None
    last: float | None = None
    plan: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    depth: int = 0
    open_calls: dict[int, str] = field(default_factory=dict)  # intents without outcome
    events: int = 0
    retries: int = 0
    failures: int = 0
    resumes: int = 0
    status: str = "running"


def story(events: Iterator[EventView]) -> Iterator[list[Piece]]:
    """The lines of the timeline, one per event, then a one-line summary."""
    s = _Story()
    for e in events:
        at = e.at.timestamp()
        if s.start is None:
            s.start = at
        s.events += 1
        render = _RENDER.get(e.type)
        indent = "  " * s.depth
        text = render(s, e.data, at) if render else [(f"· {e.type} ", "dim"), brief(e.data, 120)]
        if e.type == "step_completed":
            indent = "  " * s.depth  # the step closed: its end line sits at its start's level
        if at < s.start:  # a fork's inherited call keeps its parent's time
            since = f"  {'inherited':>11}  "
        else:
            since = f"  {f'+{at - s.start:.3f}':>10}s  "
            s.last = at
        yield [(f"{e.position:>5}  ", "dim"), (clock(e.at), "dim"), (since, "dim"), indent, *text]
    if s.start is None:
        yield [("  (no events)", "dim")]
        return
    total = (s.last or s.start) - s.start
    yield [
        ("  ", ""),
        (
            f"{s.events} events over {seconds(total)}; retries {s.retries}, "
            f"failed attempts {s.failures}, resumes {s.resumes}; now ",
            "dim",
        ),
        _status(s.status),
    ]


Render = Callable[[_Story, dict[str, Any], float], list[Piece]]


def _started(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    out: list[Piece] = [("▶ started ", "bold"), d.get("agent", ""), ("  input ", "dim")]
    out.append(brief(d.get("input"), 100))
    if d.get("parent_run_id"):
        effects = f", effects: {d['effects']}" if d.get("effects") else ""
        fork = f"  (a fork of {short(d['parent_run_id'])} at {d['fork_position']}{effects})"
        out.append((fork, "cyan"))
    return out


def _resumed(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.resumes += 1
    s.status = "running"
    gap = at - (s.last or at)
    out: list[Piece] = [("⟳ resumed", "bold blue"), f" by {d.get('owner') or '?'}"]
    out.append((f" after {seconds(gap)}", "dim"))
    if s.open_calls:
        inflight = ", ".join(f"call {c} {t}" for c, t in sorted(s.open_calls.items()))
        out.append((f"  (in flight when it stopped: {inflight}; outcome unknown)", "yellow"))
    s.depth = 0
    return out


def _finished(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.status, s.depth = "completed", 0
    return [("■ completed", "bold green"), " → ", brief(d.get("output"), 100)]


def _failed(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.status, s.depth = "failed", 0
    call = f" at call {d['call']}" if d.get("call") is not None else ""
    return [("■ failed", "bold red"), f" ({d.get('kind')}{call}): ", (d.get("error", ""), "red")]


def _abandoned(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.status, s.depth = "abandoned", 0
    reason = d.get("reason")
    return [("■ abandoned", "bold red"), f" ({reason})" if reason else ""]


def _plan(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.plan, s.done = list(d.get("steps", [])), []
    return [("☰ plan: ", "bold"), " → ".join(s.plan), (f"  (0/{len(s.plan)})", "dim")]


def _step_started(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.depth += 1
    return [("▸ step ", "bold"), (repr(d.get("name")), "bold")]


def _step_completed(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.depth = max(0, s.depth - 1)
    name = d.get("name", "")
    if name in s.plan and name not in s.done:
        s.done.append(name)
    progress = f"  [plan {len(s.done)}/{len(s.plan)}]" if name in s.plan else ""
    took = seconds(d.get("duration"))
    if d.get("error"):
        return [("✗ step ", "red"), repr(name), f" ended after {took}: ", (d["error"], "red")]
    return [("✓ step ", "green"), repr(name), f" done in {took}", (progress, "cyan")]


def _decided(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    took = seconds(d.get("duration"))
    return [("✦ decided ", "cyan"), repr(d.get("name")), " → ", brief(d.get("value")), f" ({took})"]


def _checkpoint(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    return [("◆ checkpoint ", "bold magenta"), (repr(d.get("name")), "magenta")]


def _asked(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.status = "paused"
    label = "? uncertain, asks: " if d.get("reason") == "uncertain" else "? asks: "
    return [(label, "bold yellow"), d.get("question", "")]


def _answered(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.status = "running"
    return [("✎ answered ", "yellow"), brief(d.get("value"))]


def _invoked(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    tool, call = d.get("tool", "?"), d.get("call", 0)
    s.open_calls[call] = tool
    args = ", ".join(f"{k}={brief(v, 40)}" for k, v in (d.get("args") or {}).items())
    out: list[Piece] = [("→ ", "bold"), (tool, "bold"), f"({args})", (f"  call {call}", "dim")]
    if d.get("side_effect"):
        out.append((f"  side effect, key {d.get('key')}: intent recorded", "yellow"))
    return out


_SOURCES = {
    "verified": "verified: the effect had already happened",
    "ledger": "from the ledger: this effect was already done",
    "fallback": "fallback (breaker open)",
    "human": "a person confirmed it happened",
    "parent": "reused: the parent's effect, not sent again",
}


def _succeeded(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    tool = d.get("tool", "?")
    s.open_calls.pop(d.get("call", 0), None)
    attempt = d.get("attempt", 1)
    extra = f", attempt {attempt}" if attempt > 1 else ""
    out: list[Piece] = [("✓ ", "green"), tool, " → ", brief(d.get("result"))]
    out.append((f"  ({seconds(d.get('duration'))}{extra})", "dim"))
    source = d.get("source", "executed")
    if source in _SOURCES:
        out.append((f"  {_SOURCES[source]}", "cyan"))
    return out


def _tool_failed(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.failures += 1
    if d.get("final", True):
        s.open_calls.pop(d.get("call", 0), None)
    kind = d.get("kind", "?")
    end = "gave up" if d.get("final", True) else f"attempt {d.get('attempt', 1)}"
    return [
        ("✗ ", "red"),
        d.get("tool", "?"),
        (f" {kind}", "bold red"),
        f": {d.get('message', '')}",
        (f"  ({end}, {seconds(d.get('duration'))})", "dim"),
    ]


def _retry(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    s.retries += 1
    return [
        ("↻ retry ", "yellow"),
        d.get("tool", "?"),
        f": attempt {d.get('attempt')} in {seconds(d.get('delay'))} (backoff with jitter)",
    ]


def _compensating(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    return [("↶ compensating ", "yellow"), d.get("tool", "?"), f" (call {d.get('call')})"]


def _compensated(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    if d.get("error"):
        return [("↶ compensation failed ", "red"), d.get("tool", "?"), f": {d['error']}"]
    return [("↶ undone ", "yellow"), d.get("tool", "?"), " → ", brief(d.get("result"))]


def _imported(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    signed = "signed" if d.get("signed") else "unsigned"
    where = f"from {d.get('source') or '?'} by {d.get('by') or '?'} ({signed})"
    return [("⇣ imported ", "bold magenta"), where, ("  history only until adopted", "dim")]


def _adopted(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    return [("✓ adopted ", "bold magenta"), f"by {d.get('by') or '?'}: runs as {d.get('agent')}"]


def _circuit(s: _Story, d: dict[str, Any], at: float) -> list[Piece]:
    return [("⚡ circuit ", "yellow"), d.get("tool", "?"), f" {brief(d)}"]


_RENDER: dict[str, Render] = {
    "agent_started": _started,
    "agent_resumed": _resumed,
    "agent_finished": _finished,
    "agent_failed": _failed,
    "agent_abandoned": _abandoned,
    "plan_created": _plan,
    "step_started": _step_started,
    "step_completed": _step_completed,
    "llm_decided": _decided,
    "checkpoint": _checkpoint,
    "human_input_requested": _asked,
    "human_input_provided": _answered,
    "tool_invoked": _invoked,
    "tool_succeeded": _succeeded,
    "tool_failed": _tool_failed,
    "retry_scheduled": _retry,
    "compensation_started": _compensating,
    "compensated": _compensated,
    "run_imported": _imported,
    "run_adopted": _adopted,
    "circuit_opened": _circuit,
    "circuit_half_opened": _circuit,
    "circuit_closed": _circuit,
}
