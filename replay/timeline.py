"""A run's timeline as a story: one line per event, written as it is read.

Each line shows the position, the UTC time and the time since the run started, then
what happened: calls with their arguments and results, durations and attempts, failure
kinds and retries, checkpoints, plan progress, crashes and resumes, and fork lineage.
The events come from the timeline view when it holds the whole run, else from the log a
page at a time; both give the same lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine import RunState
from engine import events as ev
from engine.kinds import NOW, Asked, RunStatus, Source
from engine.log.effects import answered
from engine.log.history import PAGE, iter_run
from engine.log.state import ChildOf, ForkOf, lineage_of
from engine.showing import shown, shown_event, utc
from projections.views import timeline as timeline_view
from projections.views.timeline import Figures, tally_at

from .output import Piece, brief, clock, seconds, short
from .timeline_agents import RENDER as AGENT_LINES
from .timeline_graphs import RENDER as GRAPH_LINES
from .timeline_ops import RENDER as OPS_LINES

if TYPE_CHECKING:
    from engine.runtime.run.catalog import Catalog
    from engine.store import Recorded


def views(engine: Catalog, run_id: str, page: int = PAGE) -> Iterator[Recorded]:
    """The run's typed events in order as users may see them (``shown``), read ``page``
    at a time and checked (``CorruptData`` at the first damaged position)."""
    return (shown(r) for r in iter_run(engine.store, run_id, page=page))


def events(engine: Catalog, run_id: str) -> Iterable[ev.Positioned]:
    """The run's events as :func:`views` gives them: from the timeline view when it holds
    the whole run (see :func:`projections.views.timeline.read`), else from the log."""
    found = timeline_view.read(engine.store, run_id)
    return views(engine, run_id) if found is None else found.entries


def json_rows(events: Iterable[ev.Positioned]) -> Iterator[dict[str, Any]]:
    """``{"position", "type", "at", ...event fields}`` per event, as users may see it
    (as :class:`~engine.EventView` shows a recorded event)."""
    for r in events:
        e = shown_event(r.event)
        doc: dict[str, Any] = {"position": r.position, "type": str(e.__struct_config__.tag)}
        yield doc | {"at": utc(e.at)} | ev.event_data(e)


def header(state: RunState, children: list[tuple[str, int | None]]) -> list[list[Piece]]:
    """Who the run is and where it comes from (its parent, a fork's or a child's; its
    forks)."""
    rows: list[list[Piece]] = [
        [("run ", "bold"), (state.run_id, "bold"), f"  {state.agent}  ", _status(state.status)]
    ]
    match state.lineage:
        case ChildOf(parent_run_id=parent):
            rows.append(["  child of ", (parent, "cyan")])
        case ForkOf(parent_run_id=parent, fork_position=position):
            rows.append(["  forked from ", (parent, "cyan"), f" at position {position}"])
    for child, at in children:
        rows.append(["  branch ", (child, "cyan"), f" forked from here at position {at}"])
    rows.append([(f"{'pos':>5}  {'time (UTC)':<12}  {'since start':>11}  event", "dim")])
    return rows


_STYLES: dict[str, str] = {
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.ABANDONED: "red",
    RunStatus.PAUSED: "yellow",
    RunStatus.WAITING: "magenta",
    RunStatus.HELD: "yellow",
}


def _status(status: str) -> Piece:
    return (str(status), "bold " + _STYLES.get(status, "blue"))


@dataclass
class _Story:
    """What the narrator remembers while walking the events; the tally (times, counts,
    status) is the timeline view's own (:func:`projections.views.timeline.tally`)."""

    plan: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    depth: int = 0
    open_calls: dict[int, str] = field(default_factory=dict)  # intents without outcome
    figures: Figures = field(default_factory=Figures)


def story(
    events: Iterable[ev.Positioned], keep: Callable[[int], bool] | None = None
) -> Iterator[list[Piece]]:
    """The lines of the timeline, one per event, then a one-line summary; with ``keep``
    (a test of a position), only the lines of the events it keeps: each other event only
    moves the story on, as cheaply as it can (a page of a long run)."""
    s = _Story()
    for r in events:
        e = r.event
        if keep is not None and not keep(r.position):
            _move_on(s, r.position, e)
            continue
        when = utc(e.at)
        at = when.timestamp()  # as shown: the datetime's own rounding of the stored time
        start = at if s.figures.started_at is None else s.figures.started_at
        render = _RENDER.get(type(e))
        indent = "  " * s.depth
        text = render(s, e, at) if render else _other(e, at)
        if isinstance(e, ev.StepCompleted):
            indent = "  " * s.depth  # the step closed: its end line sits at its start's level
        # a fork's inherited call keeps its parent's time
        since = f"  {'inherited':>11}  " if at < start else f"  {f'+{at - start:.3f}':>10}s  "
        s.figures = tally_at(s.figures, r.position, e, at)
        yield [(f"{r.position:>5}  ", "dim"), (clock(when), "dim"), (since, "dim"), indent, *text]
    yield summary(s.figures)


def _move_on(s: _Story, position: int, e: ev.Event) -> None:
    """The event's mark on the narrator's memory, without its line: a call's intent and
    outcome by hand (the events of most lines), any other by its renderer."""
    at = utc(e.at).timestamp()
    if isinstance(e, ev.ToolInvoked):
        s.open_calls[e.call] = e.tool
    elif isinstance(e, ev.ToolSucceeded | ev.ToolFailed):
        _settle(s, e)
    elif (render := _RENDER.get(type(e))) is not None:
        render(s, e, at)
    s.figures = tally_at(s.figures, position, e, at)


def summary(f: Figures) -> list[Piece]:
    """The timeline's last line: how many events over how long, and where the run is."""
    if f.started_at is None:
        return [("  (no events)", "dim")]
    return [
        ("  ", ""),
        (
            f"{f.events} events over {seconds(f.duration)}; retries {f.retries}, "
            f"failed attempts {f.failed_attempts}, resumes {f.resumes}; now ",
            "dim",
        ),
        _status(f.status),
    ]


Render = Callable[[_Story, Any, float], list[Piece]]


def _other(e: ev.Event, at: float) -> list[Piece]:
    """The line of an event of many agents (:mod:`replay.timeline_agents`), of a
    LangGraph thread (:mod:`replay.timeline_graphs`), of an operator's
    (:mod:`replay.timeline_ops`), or of any other: its type and fields."""
    agents = AGENT_LINES.get(type(e)) or GRAPH_LINES.get(type(e)) or OPS_LINES.get(type(e))
    if agents is not None:
        return agents(e, at)
    return [(f"· {e.__struct_config__.tag} ", "dim"), brief(ev.event_data(e), 120)]


def _started(s: _Story, e: ev.AgentStarted, at: float) -> list[Piece]:
    out: list[Piece] = [("▶ started ", "bold"), e.agent, ("  input ", "dim")]
    out.append(brief(e.input, 100))
    if e.version is not None:
        out.append((f"  version {e.version}", "dim"))
    match lineage_of(e):
        case ChildOf(parent_run_id=parent):
            out.append((f"  (a child of {short(parent)})", "cyan"))
        case ForkOf(parent_run_id=parent, fork_position=at):
            effects = f", effects: {e.effects}" if e.effects else ""
            out.append((f"  (a fork of {short(parent)} at {at}{effects})", "cyan"))
    return out


def _resumed(s: _Story, e: ev.AgentResumed, at: float) -> list[Piece]:
    gap = at - (s.figures.last_at or at)
    out: list[Piece] = [("⟳ resumed", "bold blue"), f" by {e.owner or '?'}"]
    out.append((f" after {seconds(gap)}", "dim"))
    if s.open_calls:
        inflight = ", ".join(f"call {c} {t}" for c, t in sorted(s.open_calls.items()))
        out.append((f"  (in flight when it stopped: {inflight}; outcome unknown)", "yellow"))
    s.depth = 0
    return out


def _queued(s: _Story, e: ev.RunQueued, at: float) -> list[Piece]:
    out: list[Piece] = [("⋯ queued ", "dim"), f"in {e.queue!r}"]
    if e.priority:
        out.append(f" priority {e.priority}")
    if e.partition is not None:
        out.append(f" partition {e.partition!r}")
    return out


def _dequeued(s: _Story, e: ev.RunDequeued, at: float) -> list[Piece]:
    gap = at - (s.figures.last_at or at)
    return [("▷ claimed ", "bold"), f"by {e.owner or '?'}", (f" after {seconds(gap)}", "dim")]


def _finished(s: _Story, e: ev.AgentFinished, at: float) -> list[Piece]:
    s.depth = 0
    return [("■ completed", "bold green"), " → ", brief(e.output, 100)]


def _failed(s: _Story, e: ev.AgentFailed, at: float) -> list[Piece]:
    s.depth = 0
    call = f" at call {e.call}" if e.call is not None else ""
    return [("■ failed", "bold red"), f" ({e.kind}{call}): ", (e.error, "red")]


def _abandoned(s: _Story, e: ev.AgentAbandoned, at: float) -> list[Piece]:
    s.depth = 0
    return [("■ abandoned", "bold red"), f" ({e.reason})" if e.reason else ""]


def _plan(s: _Story, e: ev.PlanCreated, at: float) -> list[Piece]:
    s.plan, s.done = list(e.steps), []
    return [("☰ plan: ", "bold"), " → ".join(s.plan), (f"  (0/{len(s.plan)})", "dim")]


def _step_started(s: _Story, e: ev.StepStarted, at: float) -> list[Piece]:
    s.depth += 1
    return [("▸ step ", "bold"), (repr(e.name), "bold")]


def _step_completed(s: _Story, e: ev.StepCompleted, at: float) -> list[Piece]:
    s.depth = max(0, s.depth - 1)
    name = e.name
    if name in s.plan and name not in s.done:
        s.done.append(name)
    progress = f"  [plan {len(s.done)}/{len(s.plan)}]" if name in s.plan else ""
    took = seconds(e.duration)
    if e.error:
        return [("✗ step ", "red"), repr(name), f" ended after {took}: ", (e.error, "red")]
    return [("✓ step ", "green"), repr(name), f" done in {took}", (progress, "cyan")]


def _decided(s: _Story, e: ev.LlmDecided, at: float) -> list[Piece]:
    if e.name == NOW and isinstance(e.value, int | float) and not isinstance(e.value, bool):
        return [("⏱ now ", "cyan"), _reading(e.value)]
    took = seconds(e.duration)
    extra = f", attempt {e.attempt}" if e.attempt > 1 else ""
    extra += f", answered by fallback {e.answered_by}" if e.answered_by else ""
    out: list[Piece] = [("✦ decided ", "cyan"), repr(e.name), " → ", brief(e.value)]
    out.append(f" ({took}{extra})")
    if e.tokens_in or e.tokens_out or e.cost is not None:
        out.append((f"  {_usage(e)}", "dim"))
    return out


def _reading(value: float) -> str:
    """A recorded ``run.now()`` as a UTC time (as given when it is none)."""
    try:
        return utc(value).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return brief(value)


def _usage(e: ev.LlmDecided | ev.UsageRecorded) -> str:
    cost = "" if e.cost is None else f", cost {e.cost:g}"
    return f"{e.tokens_in} tokens in, {e.tokens_out} out{cost}"


def _used(s: _Story, e: ev.UsageRecorded, at: float) -> list[Piece]:
    return [("✦ usage ", "cyan"), _usage(e)]


def _checkpoint(s: _Story, e: ev.Checkpoint, at: float) -> list[Piece]:
    return [("◆ checkpoint ", "bold magenta"), (repr(e.name), "magenta")]


def _asked(s: _Story, e: ev.HumanInputRequested, at: float) -> list[Piece]:
    label = "? uncertain, asks: " if e.reason == Asked.UNCERTAIN else "? asks: "
    return [(label, "bold yellow"), e.question]


def _answered(s: _Story, e: ev.HumanInputProvided, at: float) -> list[Piece]:
    return [("✎ answered ", "yellow"), brief(e.value)]


def _invoked(s: _Story, e: ev.ToolInvoked, at: float) -> list[Piece]:
    s.open_calls[e.call] = e.tool
    args = ", ".join(f"{k}={brief(v, 40)}" for k, v in (e.args or {}).items())
    out: list[Piece] = [("→ ", "bold"), (e.tool, "bold"), f"({args})", (f"  call {e.call}", "dim")]
    if e.side_effect:
        out.append((f"  side effect, key {e.key}: intent recorded", "yellow"))
    return out


_SOURCES: dict[str, str] = {
    Source.VERIFIED: "verified: the effect had already happened",
    Source.LEDGER: "from the ledger: this effect was already done",
    Source.FALLBACK: "fallback (breaker open)",
    Source.HUMAN: "a person confirmed it happened",
    Source.PARENT: "reused: the parent's effect, not sent again",
    Source.REFRESHED: "refreshed: read again after the pause (refresh_after)",
}


def _settle(s: _Story, e: ev.Event) -> None:
    call = answered(e)
    if call is not None:
        s.open_calls.pop(call, None)


def _succeeded(s: _Story, e: ev.ToolSucceeded, at: float) -> list[Piece]:
    _settle(s, e)
    extra = f", attempt {e.attempt}" if e.attempt > 1 else ""
    out: list[Piece] = [("✓ ", "green"), e.tool, " → ", brief(e.result)]
    out.append((f"  ({seconds(e.duration)}{extra})", "dim"))
    if e.source in _SOURCES:
        out.append((f"  {_SOURCES[e.source]}", "cyan"))
    return out


def _tool_failed(s: _Story, e: ev.ToolFailed, at: float) -> list[Piece]:
    _settle(s, e)
    end = "gave up" if e.final else f"attempt {e.attempt}"
    return [
        ("✗ ", "red"),
        f"decision {e.tool!r}" if e.decision else e.tool,
        (f" {e.kind}", "bold red"),
        f": {e.message}",
        (f"  ({end}, {seconds(e.duration)})", "dim"),
    ]


def _retry(s: _Story, e: ev.RetryScheduled, at: float) -> list[Piece]:
    return [
        ("↻ retry ", "yellow"),
        f"decision {e.tool!r}" if e.decision else e.tool,
        f": attempt {e.attempt} in {seconds(e.delay)} (backoff with jitter)",
    ]


def _compensating(s: _Story, e: ev.CompensationStarted, at: float) -> list[Piece]:
    return [("↶ compensating ", "yellow"), e.tool, f" (call {e.call})"]


def _compensated(s: _Story, e: ev.Compensated, at: float) -> list[Piece]:
    if e.error:
        return [("↶ compensation failed ", "red"), e.tool, f": {e.error}"]
    return [("↶ undone ", "yellow"), e.tool, " → ", brief(e.result)]


_RENDER: dict[type[ev.Event], Render] = {
    ev.AgentStarted: _started,
    ev.AgentResumed: _resumed,
    ev.RunQueued: _queued,
    ev.RunDequeued: _dequeued,
    ev.AgentFinished: _finished,
    ev.AgentFailed: _failed,
    ev.AgentAbandoned: _abandoned,
    ev.PlanCreated: _plan,
    ev.StepStarted: _step_started,
    ev.StepCompleted: _step_completed,
    ev.LlmDecided: _decided,
    ev.UsageRecorded: _used,
    ev.Checkpoint: _checkpoint,
    ev.HumanInputRequested: _asked,
    ev.HumanInputProvided: _answered,
    ev.ToolInvoked: _invoked,
    ev.ToolSucceeded: _succeeded,
    ev.ToolFailed: _tool_failed,
    ev.RetryScheduled: _retry,
    ev.CompensationStarted: _compensating,
    ev.Compensated: _compensated,
}
