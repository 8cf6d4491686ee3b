"""Text views of runs and state for the CLI: the run list, a run's summary, checkpoints,
and the outcome of run/resume/answer/abandon/rewind with what to do next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine import RunResult, RunState, RunSummary
from engine.kinds import RunStatus
from engine.log.effects import Effect
from engine.log.state import CheckpointRef, ChildOf, ForkOf
from engine.secrets import redact

from ..output import Piece, board_summary, brief, clock, plural, seconds

if TYPE_CHECKING:
    from projections.views.runs import RunBoardRow

_STATUS_STYLE: dict[str, str] = {
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.ABANDONED: "red",
    RunStatus.PAUSED: "yellow",
    RunStatus.RUNNING: "blue",
    RunStatus.WAITING: "magenta",
    RunStatus.HELD: "yellow",
    RunStatus.DRY_RUN: "cyan",
}
# How a run with a parent names it in the run list, by its lineage (runs view's word).
_LINEAGE = {"child": "child of ", "fork": "fork of "}


def status_piece(status: str, width: int = 0) -> Piece:
    return (f"{status:<{width}}", "bold " + _STATUS_STYLE.get(status, ""))


def run_rows(runs: list[RunSummary], store: str, filtered: bool = False) -> list[list[Piece]]:
    """The run list; a run with a parent says whether it is a child or a fork of it, as
    its lineage tells (unknown: "parent")."""
    if not runs:
        return [[(f"no runs {'match in' if filtered else 'in'} {store}", "dim")]]
    rows: list[list[Piece]] = [
        [
            (
                f"{'RUN ID':<32}  {'STATUS':<9}  {'STARTED (UTC)':<19}  {'UPDATED (UTC)':<19}"
                "  AGENT  [PARENT]",
                "bold",
            )
        ]
    ]
    for r in runs:
        parent: list[Piece] = []
        if r.parent_run_id:
            kind = _LINEAGE.get(r.lineage or "", "parent ")
            parent.append(("  " + kind + r.parent_run_id, "cyan"))
        if r.unreadable:
            parent.append(("  " + r.unreadable, "red"))
        rows.append(
            [
                f"{r.run_id:<32}  ",
                status_piece(r.status, 9),
                f"  {clock(r.started_at, date=True)}  {clock(r.updated_at, date=True)}",
                f"  {r.agent}",
                *parent,
            ]
        )
    return rows


def board_rows(rows: Sequence[RunBoardRow], store: str) -> list[list[Piece]]:
    """The run list from the runs view (filtered), its lineage column saying child or fork."""
    return run_rows([board_summary(r) for r in rows], store, True)


def state_rows(
    state: RunState,
    checkpoints: Sequence[CheckpointRef],
    input: dict[str, Any],
    children: Sequence[tuple[str, int | None]] = (),
) -> list[list[Piece]]:
    """A run's summary and folded state, one fact a line (with its input and checkpoints,
    which the log keeps beside the state)."""

    def row(label: str, *value: Piece) -> list[Piece]:
        return [(f"{label:<12}", "bold"), *value]

    took = (state.updated_at or 0) - (state.started_at or 0)
    rows = [
        row("run", state.run_id),
        row("agent", state.agent),
        row("status", status_piece(state.status)),
    ]
    rows += _lineage_rows(state, children)
    rows += [
        row(
            "time",
            f"{clock(state.started_at, date=True)} UTC -> {clock(state.updated_at, date=True)} "
            f"UTC ({seconds(took)})",
        ),
        row(
            "position",
            f"{plural(state.position, 'event')}; {plural(state.calls, 'call')} "
            f"({state.tool_calls} to tools), {plural(state.retries, 'retry', 'retries')}, "
            f"{plural(state.failures, 'failed attempt')}, {plural(state.resumes, 'resume')}",
        ),
    ]
    if state.plan:
        done = set(state.steps_done)
        marks = "  ".join(("[x] " if s in done else "[ ] ") + s for s in state.plan)
        rows.append(row("plan", marks))
    if checkpoints:
        names = ", ".join(f"{c.name!r} @{c.position}" for c in checkpoints)
        rows.append(row("checkpoints", names))
    for p in state.pending:
        what = "side effect, outcome unknown" if p.side_effect else "in flight"
        rows.append(row("pending", f"call {p.call} {p.tool} ({what}, key {p.key})"))
    if state.waiting:
        rows.append(row("waiting", (state.waiting, "yellow")))
    if state.imported and state.agent.startswith("langgraph:"):
        rows.append(row("thread", ("a LangGraph thread: its graph runs it", "magenta")))
    elif state.imported:
        hint = f"history only: nothing runs it until `agentlog adopt {state.run_id}`"
        rows.append(row("imported", (hint, "magenta")))
    rows.append(row("input", brief(redact(input), 200)))
    if state.status == RunStatus.COMPLETED:
        rows.append(row("output", brief(state.output, 200)))
    if state.error:
        rows.append(row("error", (state.error, "red")))
    if state.compensated:
        rows.append(row("compensated", f"{state.compensated} effects undone"))
    if state.last_observation:
        rows.append(row("last seen", state.last_observation[:200]))
    return rows


def _lineage_rows(state: RunState, forks: Sequence[tuple[str, int | None]]) -> list[list[Piece]]:
    """Where the run comes from (a fork's parent, or a child's) and its forks."""
    rows: list[list[Piece]] = []
    match state.lineage:
        case ForkOf(parent_run_id=parent, fork_position=at):
            rows.append([(f"{'forked from':<12}", "bold"), (parent, "cyan"), f" at {at}"])
        case ChildOf(parent_run_id=parent):
            rows.append([(f"{'child of':<12}", "bold"), (parent, "cyan"), ""])
    for fork, position in forks:
        rows.append(
            [(f"{'branch':<12}", "bold"), (fork, "cyan"), f" forked at position {position}"]
        )
    return rows


def owner_row(owner: dict[str, Any] | None) -> list[Piece]:
    """Who executes a running run; a gone owner means ``agentlog recover`` will resume it."""
    label: Piece = (f"{'owner':<12}", "bold")
    if owner is None:
        return [label, ("none: its process stopped; `agentlog recover` resumes it", "yellow")]
    if owner["alive"]:
        return [label, f"{owner['owner']} (alive, lease until {clock(owner['lease_until'])})"]
    return [label, (f"{owner['owner']} is gone; `agentlog recover` resumes it", "yellow")]


def checkpoint_rows(run_id: str, checkpoints: Sequence[CheckpointRef]) -> list[list[Piece]]:
    if not checkpoints:
        return [[(f"run {run_id} has no checkpoints", "dim")]]
    rows: list[list[Piece]] = [[(f"{'POSITION':>8}  {'AT (UTC)':<23}  NAME", "bold")]]
    for c in checkpoints:
        rows.append([f"{c.position:>8}  {clock(c.at, date=True)}.{clock(c.at)[-3:]}  ", c.name])
    return rows


def result_rows(r: RunResult, failure: tuple[str, int | None] | None = None) -> list[list[Piece]]:
    """What happened, and the command that moves the run on (for a failed run, by its
    ``failure``: kind and failed call, None for the agent's own code)."""
    rows: list[list[Piece]] = [["run ", (r.run_id, "bold"), " ", status_piece(r.status)]]
    if r.status == RunStatus.COMPLETED:
        rows.append(["output: ", brief(r.output, 400)])
    elif r.status == RunStatus.PAUSED:
        rows.append(["waiting for an answer: ", (r.waiting or "?", "yellow")])
        rows.append([("next: ", "dim"), f"agentlog answer {r.run_id[:12]} VALUE"])
    elif r.status == RunStatus.WAITING:
        rows.append(["waiting for: ", (r.waiting or "?", "magenta")])
        rows.append(
            [("next: ", "dim"), "it resumes when that is due (`agentlog recover` wakes it)"]
        )
    elif r.status == RunStatus.HELD:
        rows.append(["held for ", (r.waiting or "approval", "yellow")])
        rows.append([("next: ", "dim"), f"agentlog approve {r.run_id[:12]}  (or abandon it)"])
    elif r.status == RunStatus.FAILED:
        rows.append(["error: ", (r.error or "?", "red")])
        rows.append([("next: ", "dim"), f"agentlog resume {r.run_id[:12]}  {_again(failure)}"])
    elif r.status == RunStatus.DRY_RUN:  # a dry-run fork: nothing was sent
        ended = brief(r.output, 400) if r.error is None else (r.error, "yellow")
        rows.append(["dry run, nothing sent: ", ended])
    elif r.status == RunStatus.ABANDONED and r.error:
        rows.append(["reason: ", r.error])
    return rows


def _again(failure: tuple[str, int | None] | None) -> str:
    """What a resume of a failed run will do: a deterministic failure recurs."""
    if failure is None or (failure[0] in ("transient", "indeterminate") and failure[1]):
        return "(re-attempts the call)"
    what = "the agent's code" if failure[1] is None else f"call {failure[1]}"
    return f"(after fixing the cause: {what} failed {failure[0]}, and would fail the same way)"


FORK_STANDING = (
    "effects after the fork position of the parent and its children, "
    "not reused by this fork and not compensated"
)


def standing_docs(standing: Sequence[Effect]) -> list[dict[str, Any]]:
    """Effects (still standing, or compensated) as ``--json`` shows them; ``run_id`` names
    the run of each (the parent, or one of its descendants)."""
    return [
        {"run_id": e.run_id, "call": e.call, "tool": e.tool, "key": e.key, "result": e.result}
        for e in standing
    ]


def effects_docs(r: RunResult) -> dict[str, list[dict[str, Any]]]:
    """A rewind's or an abandon's effects still standing and compensated, for ``--json``."""
    return {"standing": standing_docs(r.standing), "compensated": standing_docs(r.compensated)}


def _effect_row(e: Effect) -> list[Piece]:
    where = f"run {e.run_id[:12]} " if e.run_id else ""
    return [f"  {where}call {e.call} {e.tool} (key {e.key}) -> ", brief(e.result, 120)]


def standing_rows(standing: Sequence[Effect], why: str) -> list[list[Piece]]:
    """Effects that still stand in the world (``why``), deepest first."""
    if not standing:
        return []
    head: list[Piece] = [("still standing", "bold yellow"), f" ({why}):"]
    return [head] + [_effect_row(e) for e in standing]


def compensated_rows(undone: Sequence[Effect], why: str) -> list[list[Piece]]:
    """Effects undone (``why``), deepest first."""
    if not undone:
        return []
    head: list[Piece] = [("compensated", "bold yellow"), f" ({why}):"]
    return [head] + [_effect_row(e) for e in undone]


def reused_rows(reused: Sequence[Effect]) -> list[list[Piece]]:
    """The parent's effects after the fork position that the fork took over, not resent."""
    if not reused:
        return []
    why = "the parent's effects after the fork position that this fork took over"
    head: list[Piece] = [("reused", "bold green"), f" ({why} instead of sending again):"]
    return [head] + [_effect_row(e) for e in reused]
